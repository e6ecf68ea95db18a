"""Worker report streams: only a run's own workers may report, and reports cannot name paths."""

from __future__ import annotations

import os
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwire_coordinator.admission.report_checks import ReportSecrets, check_report
from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError
from trainwire_core.serving import REPORT_RUN_ID_METADATA, REPORT_SECRET_METADATA
from trainwire_core.v1 import common_pb2, worker_reports_pb2, worker_reports_pb2_grpc

SHA = "0" * 64


def _report(run_id: str, checkpoint_id: str = "", paths: tuple[str, ...] = ()) -> worker_reports_pb2.WorkerReport:
    return worker_reports_pb2.WorkerReport(
        run_id=run_id,
        world_rank=0,
        report=worker_reports_pb2.TrainingReport(
            report_index=1,
            checkpoint_id=checkpoint_id,
            has_checkpoint=bool(checkpoint_id),
            files=[common_pb2.ManifestFile(path=p, size_bytes=1, sha256=SHA) for p in paths],
        ),
    )


def test_secrets_are_per_run_and_per_key():
    secrets = ReportSecrets("k")
    assert secrets.secret_for("a") != secrets.secret_for("b")
    assert ReportSecrets("k").secret_for("a") == secrets.secret_for("a")  # a restarted coordinator agrees
    assert ReportSecrets().secret_for("a") != ReportSecrets().secret_for("a")
    meta = {REPORT_RUN_ID_METADATA: "a", REPORT_SECRET_METADATA: secrets.secret_for("a")}
    assert secrets.authorize(meta) == "a"
    with pytest.raises(UnauthenticatedError):
        secrets.authorize({REPORT_RUN_ID_METADATA: "a"})
    with pytest.raises(PermissionDeniedError, match="'a'"):
        secrets.authorize({REPORT_RUN_ID_METADATA: "a", REPORT_SECRET_METADATA: secrets.secret_for("b")})


@pytest.mark.parametrize("checkpoint_id", ["../evil", "..", ".", "a/b", "", "x\x00", "/abs", "a\\b"])
def test_checkpoint_id_must_be_a_plain_component(checkpoint_id):
    if checkpoint_id == "":
        with pytest.raises(InvalidArgumentError, match="report.files"):
            check_report(_report("r", "", ("m.pt",)), "r")
        return
    with pytest.raises(InvalidArgumentError) as err:
        check_report(_report("r", checkpoint_id, ("m.pt",)), "r")
    assert err.value.field == "report.checkpoint_id"


@pytest.mark.parametrize("path", ["../m.pt", "a/../../m.pt", "/etc/passwd", "a//b", "", "a\\..\\b", "./m.pt"])
def test_file_paths_stay_inside_the_checkpoint(path):
    with pytest.raises(InvalidArgumentError) as err:
        check_report(_report("r", "checkpoint_000001", (path,)), "r")
    assert err.value.field == "report.files[0].path"


def test_nested_file_paths_are_allowed():
    check_report(_report("r", "checkpoint_000001", ("model/config.json", "model.pt")), "r")


def test_a_stream_cannot_report_for_another_run():
    with pytest.raises(PermissionDeniedError):
        check_report(_report("other"), "mine")


def _send(address: str, reports, metadata=()):
    with grpc.insecure_channel(address) as channel:
        stub = worker_reports_pb2_grpc.WorkerReportsStub(channel)
        return stub.ReportStream(iter(reports), metadata=metadata, timeout=10)


def _slow_loop(config):
    import time as _time

    from trainwire import train

    train.report({"step": 1})
    _time.sleep(config["sleep_s"])


@pytest.fixture
def running_run(client):
    """A one-worker run that stays RUNNING for a few seconds."""
    from trainwire import ScalingConfig
    from trainwire.torch import TorchTrainer

    trainer = TorchTrainer(_slow_loop, train_loop_config={"sleep_s": 8}, scaling_config=ScalingConfig(num_workers=1))
    run = client.fit(trainer.build_request(client))
    deadline = time.monotonic() + 90
    while client.get_run(run.run_id).state != common_pb2.RUNNING:
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.2)
    return run


def _all_files(root: str) -> set[str]:
    return {os.path.join(d, f) for d, _, files in os.walk(root) for f in files}


def test_forged_reports_are_refused_and_write_nothing(coordinator, coordinator_address, client, running_run):
    run_id = running_run.run_id
    secrets = coordinator.server.runs.report_secrets
    root = coordinator.server.runs.store.root
    before = _all_files(root)

    with pytest.raises(grpc.RpcError) as err:
        _send(coordinator_address, [_report(run_id, "checkpoint_000099", ("m.pt",))])
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert REPORT_SECRET_METADATA in err.value.details()

    other = ((REPORT_RUN_ID_METADATA, run_id), (REPORT_SECRET_METADATA, secrets.secret_for("another-run")))
    with pytest.raises(grpc.RpcError) as err:
        _send(coordinator_address, [_report(run_id, "checkpoint_000099", ("m.pt",))], other)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED

    # A stream authorized for another run cannot report for this one.
    theirs = ((REPORT_RUN_ID_METADATA, "another-run"), (REPORT_SECRET_METADATA, secrets.secret_for("another-run")))
    with pytest.raises(grpc.RpcError) as err:
        _send(coordinator_address, [_report(run_id, "checkpoint_000099", ("m.pt",))], theirs)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED

    # Even with the run's own secret, a checkpoint id with "../" never reaches the store.
    own = ((REPORT_RUN_ID_METADATA, run_id), (REPORT_SECRET_METADATA, secrets.secret_for(run_id)))
    with pytest.raises(grpc.RpcError) as err:
        _send(coordinator_address, [_report(run_id, "../../../evil", ("m.pt",))], own)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "report.checkpoint_id" in err.value.details()

    assert _all_files(root) - before <= {
        f for f in _all_files(root) if f.startswith(os.path.join(root, "runs", run_id) + os.sep)
    }
    assert not [f for f in _all_files(root) if "evil" in f]
    assert client.get_run(run_id).state == common_pb2.RUNNING  # the real workers carry on


_text = st.text(max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    run_id=_text,
    secret=_text,
    checkpoint_id=_text,
    paths=st.lists(_text, max_size=3),
)
def test_garbled_report_streams_never_internal(coordinator_address, run_id, secret, checkpoint_id, paths):
    metadata = [(REPORT_RUN_ID_METADATA, run_id), (REPORT_SECRET_METADATA, secret)]
    metadata = [(k, v) for k, v in metadata if v.isascii() and v.isprintable()]
    report = _report(run_id, checkpoint_id, tuple(paths))
    with grpc.insecure_channel(coordinator_address) as channel:
        raw = channel.stream_unary(
            "/trainwire.v1.WorkerReports/ReportStream",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            raw(iter([report.SerializeToString()] * 2), metadata=metadata, timeout=10)
        except grpc.RpcError as err:
            assert err.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), err.details()
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(coordinator_address) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING
