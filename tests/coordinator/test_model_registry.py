"""The coordinator's ModelRegistry over gRPC and the ``trainwire models`` commands.

The registry service runs alone on a grpc.aio server with the coordinator's token
interceptor and scopes (no Ray needed); models are committed in process.
"""

from __future__ import annotations

import json

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving_fixtures import commit_checkpoint

from trainwire.cli import main as cli
from trainwire.model_registry import ModelRegistryClient, parse_weights
from trainwire_coordinator.integrations.model_registry import ModelRegistry, ModelRegistryServicer
from trainwire_coordinator.server import METHOD_SCOPES, PROTECTED_SERVICES
from trainwire_core.auth import TokenTable
from trainwire_core.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from trainwire_core.serving import BearerTokenInterceptor, ServerThread
from trainwire_core.storage import Store
from trainwire_core.v1 import models_pb2_grpc

pytestmark = pytest.mark.timeout(60)

TOKENS = json.dumps(
    {"ops": {"token": "ops-token", "scopes": ["serve", "read"]}, "viewer": {"token": "view-token", "scopes": ["read"]}}
)


class RegistryServer:
    """The ModelRegistry service as the coordinator serves it: its interceptor, scopes and servicer."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.server: grpc.aio.Server | None = None

    async def start(self) -> str:
        interceptor = BearerTokenInterceptor(TokenTable.from_settings(tokens=TOKENS), PROTECTED_SERVICES, METHOD_SCOPES)
        self.server = grpc.aio.server(interceptors=[interceptor])
        models_pb2_grpc.add_ModelRegistryServicer_to_server(
            ModelRegistryServicer(ModelRegistry(self.store)), self.server
        )
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{port}"

    async def stop(self, grace_s: float) -> None:
        assert self.server is not None
        await self.server.stop(grace_s)


@pytest.fixture(scope="module")
def served_store(tmp_path_factory) -> Store:
    """Run "run-r" named "ranker" with versions c1, c2, c3."""
    root = tmp_path_factory.mktemp("registry")
    store = Store(str(root / "store"))
    src = root / "ckpt"
    src.mkdir()
    (src / "model.bin").write_bytes(b"fake")
    manager = None
    for i, version in enumerate(("c1", "c2", "c3"), 1):
        manager = commit_checkpoint(store, "run-r", "ranker", version, str(src), i, manager=manager)
    return store


@pytest.fixture(scope="module")
def address(served_store):
    thread = ServerThread(RegistryServer(served_store), "registry")
    address = thread.start()
    yield address
    thread.stop()


def run_cli(capsys, address: str, *argv: str, token: str = "ops-token") -> tuple[int, str, str]:
    code = cli(["--address", address, "--token", token, "models", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_alias_set_move_history_and_rollback_through_the_cli(address, capsys):
    assert run_cli(capsys, address, "alias", "ranker", "production", "c1")[:2] == (0, "ranker production -> c1\n")
    assert run_cli(capsys, address, "alias", "ranker", "production", "c2")[0] == 0
    assert run_cli(capsys, address, "alias", "ranker", "canary", "production")[1] == "ranker canary -> c2\n"
    code, out, _ = run_cli(capsys, address, "alias", "ranker")
    assert code == 0 and out.split("\n")[1:3] == ["canary           c2", "production       c2"]
    # Rolling back is a move back, and the history shows all three moves of production.
    assert run_cli(capsys, address, "alias", "ranker", "production", "c1")[0] == 0
    code, out, _ = run_cli(capsys, address, "alias", "ranker", "production", "--history")
    rows = [line.split() for line in out.strip().split("\n")[1:]]
    # REV, date, time, ALIAS, FROM, TO, BY
    assert code == 0 and [r[3:7] for r in rows] == [
        ["production", "-", "c1", "ops"],
        ["production", "c1", "c2", "ops"],
        ["production", "c2", "c1", "ops"],
    ]
    with ModelRegistryClient(address, token="view-token") as client:
        state = client.get_aliases("ranker", include_history=True)
    assert dict(state.aliases) == {"production": "c1", "canary": "c2"} and state.run_id == "run-r"
    assert [m.revision for m in state.history] == [1, 2, 3, 4]


def test_route_through_the_cli_and_its_errors_name_the_field(address, capsys):
    code, out, _ = run_cli(capsys, address, "route", "ranker", "--weights", "c1=90,c2=10", "--shadow", "c3")
    assert (code, out) == (0, "ranker weights c1=90,c2=10 shadow c3 (revision 1)\n")
    assert run_cli(capsys, address, "route", "ranker")[1] == "ranker weights c1=90,c2=10 shadow c3 (revision 1)\n"
    code, _, err = run_cli(capsys, address, "route", "ranker", "--weights", "c1=90,c2=20")
    assert code == 1 and "INVALID_ARGUMENT" in err and "add up to 110" in err and "(field weights)" in err
    code, _, err = run_cli(capsys, address, "route", "ranker", "--weights", "c1=90,c9=10")
    assert code == 1 and "NOT_FOUND" in err and "'c9'" in err and "(field weights[1].version)" in err
    code, _, err = run_cli(capsys, address, "alias", "ranker", "prod", "c9")
    assert code == 1 and "NOT_FOUND" in err and "(field version)" in err
    code, _, err = run_cli(capsys, address, "alias", "nomodel", "prod", "c1")
    assert code == 1 and "NOT_FOUND" in err and "'nomodel'" in err
    assert "c1=100" in run_cli(capsys, address, "route", "ranker", "--weights", "c1=100")[1]
    assert "(default version)" in run_cli(capsys, address, "route", "ranker", "--clear")[1]


def test_deleting_an_alias_is_kept_in_the_history_and_refused_while_routed(address, served_store, capsys):
    assert run_cli(capsys, address, "alias", "ranker", "staging", "c3")[0] == 0
    assert run_cli(capsys, address, "route", "ranker", "--weights", "staging=100")[0] == 0
    code, _, err = run_cli(capsys, address, "alias", "ranker", "staging", "--delete")
    assert code == 1 and "FAILED_PRECONDITION" in err and "traffic policy" in err and "(field alias)" in err
    assert run_cli(capsys, address, "route", "ranker", "--clear")[0] == 0
    assert run_cli(capsys, address, "alias", "ranker", "staging", "--delete")[:2] == (0, "ranker staging removed\n")
    # Gone from the file every predictor reads; the history shows the removal.
    state = served_store.read_json(served_store.aliases_path("run-r"))
    assert "staging" not in state["aliases"]
    code, out, _ = run_cli(capsys, address, "alias", "ranker", "staging", "--history")
    assert [line.split()[3:6] for line in out.strip().split("\n")[1:]] == [
        ["staging", "-", "c3"],
        ["staging", "c3", "(removed)"],
    ]
    code, _, err = run_cli(capsys, address, "alias", "ranker", "staging", "--delete")
    assert code == 1 and "NOT_FOUND" in err and "'staging'" in err and "(field alias)" in err
    with ModelRegistryClient(address, token="ops-token") as client, pytest.raises(InvalidArgumentError) as err:
        client.delete_alias("ranker", "")
    assert err.value.field == "alias"
    with pytest.raises(SystemExit, match="MODEL ALIAS --delete"):
        run_cli(capsys, address, "alias", "ranker", "staging", "c1", "--delete")


def test_moving_an_alias_or_a_route_needs_the_serve_scope(address):
    with ModelRegistryClient(address, token="view-token") as viewer:
        with pytest.raises(PermissionDeniedError, match="'serve'"):
            viewer.set_alias("ranker", "production", "c3")
        with pytest.raises(PermissionDeniedError, match="'serve'"):
            viewer.set_route("ranker", [("c1", 100)])
        with pytest.raises(PermissionDeniedError, match="'serve'"):
            viewer.delete_alias("ranker", "production")
        viewer.get_route("ranker")  # reading needs read only


@pytest.mark.parametrize("alias", ["", "1abc", "a/b", "a b", "c1", "x" * 65, "prod!"])
def test_bad_alias_names_are_invalid_argument_naming_alias(served_store, alias):
    with pytest.raises(InvalidArgumentError) as err:
        ModelRegistry(served_store).set_alias("ranker", alias, "c1")
    assert err.value.field == "alias"


weights = st.lists(
    st.tuples(st.sampled_from(["c1", "c2", "c3", "c9", "", "nope"]), st.integers(-20, 130)), min_size=1, max_size=4
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(weights=weights)
def test_a_route_is_set_only_from_valid_weights(served_store, weights):
    registry = ModelRegistry(served_store)
    targets = [t for t, _ in weights]
    valid = (
        sum(w for _, w in weights) == 100
        and all(0 <= w <= 100 for _, w in weights)
        and len(set(targets)) == len(targets)
        and all(t in ("c1", "c2", "c3") for t in targets)
    )
    try:
        state = registry.set_route("ranker", weights)
    except (InvalidArgumentError, NotFoundError) as err:
        assert not valid
        assert err.field.startswith("weights"), err.field
    else:
        assert valid
        assert [(w.version, w.weight) for w in state.state.route.weights] == weights


def test_parse_weights():
    assert parse_weights("a=90, b=10") == [("a", 90), ("b", 10)]
    for bad in ("a", "a=x", "=5", "a=-1"):
        with pytest.raises(InvalidArgumentError):
            parse_weights(bad)


def test_the_coordinator_serves_the_registry_with_health(coordinator_address, store, tmp_path, capsys):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "model.bin").write_bytes(b"fake")
    commit_checkpoint(store, "run-coord-reg", "coord-reg", "k1", str(src))
    assert run_cli(capsys, coordinator_address, "alias", "coord-reg", "live", "k1", token="")[:2] == (
        0,
        "coord-reg live -> k1\n",
    )
    assert store.exists(store.path("runs", "run-coord-reg", "aliases.json"))
    with grpc.insecure_channel(coordinator_address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        status = check(health_pb2.HealthCheckRequest(service="trainwire.v1.ModelRegistry"), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING
