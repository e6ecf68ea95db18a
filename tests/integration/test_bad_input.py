"""Bad input gets the right gRPC status naming the field; the server keeps serving."""

from __future__ import annotations

import hashlib

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from trainwire import ScalingConfig
from trainwire.client import table_to_ipc
from trainwire_coordinator.admission.fit_checks import wait_until_feasible
from trainwire_core.errors import InvalidArgumentError, ResourceExhaustedError
from trainwire_core.grpc_status import field_of
from trainwire_core.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def channel(coordinator_address):
    ch = grpc.insecure_channel(coordinator_address)
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(channel):
    return coordinator_pb2_grpc.CoordinatorStub(channel)


@pytest.fixture(autouse=True)
def server_keeps_serving(channel):
    yield
    health = health_pb2_grpc.HealthStub(channel)
    response = health.Check(health_pb2.HealthCheckRequest(service="trainwire.v1.Coordinator"))
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def _call_error(fn, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        result = fn(request)
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)
    return info.value


@pytest.fixture(scope="module")
def uploaded(client, cancer_data):
    return client.upload_table(pa.Table.from_pandas(cancer_data[0], preserve_index=False))


def _gbdt_request(uploaded) -> coordinator_pb2.FitRequest:
    request = coordinator_pb2.FitRequest(
        framework="xgboost", gbdt=coordinator_pb2.GBDTSpec(label_column="target", num_boost_round=2)
    )
    request.scaling_config.num_workers = 1
    request.datasets["train"].CopyFrom(uploaded.ref)
    return request


def test_num_workers_zero(stub, uploaded):
    request = _gbdt_request(uploaded)
    request.scaling_config.num_workers = 0
    err = _call_error(stub.Fit, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scaling_config.num_workers" in err.details() and "got 0" in err.details()
    assert field_of(err) == "scaling_config.num_workers"
    # In the SDK 0 is Ray's local mode (the loop runs in the calling process, no Fit is sent).
    assert ScalingConfig(num_workers=0).num_workers == 0
    with pytest.raises(InvalidArgumentError) as info:
        ScalingConfig(num_workers=-1)
    assert info.value.field == "scaling_config.num_workers"


def test_label_column_not_in_dataset(stub, uploaded):
    request = _gbdt_request(uploaded)
    request.gbdt.label_column = "no_such_label"
    err = _call_error(stub.Fit, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'no_such_label' is not in dataset 'train'" in err.details()
    assert field_of(err) == "gbdt.label_column"


def test_unknown_framework_and_missing_dataset(stub, uploaded):
    request = _gbdt_request(uploaded)
    request.framework = "caffe"
    err = _call_error(stub.Fit, request)
    assert (err.code(), field_of(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "framework")
    assert "unknown framework 'caffe'" in err.details()
    request = _gbdt_request(uploaded)
    request.datasets["train"].uri = "datasets/" + "0" * 64
    err = _call_error(stub.Fit, request)
    assert (err.code(), field_of(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "datasets[train].uri")


def test_unknown_run_id(stub):
    for method, request in [
        (stub.GetRun, coordinator_pb2.GetRunRequest(run_id="nope")),
        (stub.CancelRun, coordinator_pb2.CancelRunRequest(run_id="nope")),
        (stub.WatchRun, coordinator_pb2.WatchRunRequest(run_id="nope")),
    ]:
        err = _call_error(method, request)
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert err.details() == "no run with id or name 'nope'"


def test_more_workers_than_the_cluster_can_ever_give(stub, uploaded):
    request = _gbdt_request(uploaded)
    request.scaling_config.num_workers = 64
    err = _call_error(stub.Fit, request)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "can never be placed" in err.details() and "64 CPU (cluster has 4)" in err.details()
    assert field_of(err) == "scaling_config.num_workers"


class FakeClock:
    """A clock that moves only when slept on; notes each sleep."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_fit_waits_for_a_joining_node_then_refuses_what_the_cluster_still_cannot_hold():
    # A node still starting or restarting adds its CPUs a few seconds later.
    scaling = common_pb2.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1})
    views = iter([({}, 1), ({"CPU": 1.0}, 2), ({"CPU": 3.0}, 3)])
    clock = FakeClock()
    wait_until_feasible(scaling, lambda: next(views), 30, poll_s=0.5, sleep=clock.sleep, clock=lambda: clock.now)
    assert clock.slept == [0.5, 0.5]

    clock = FakeClock()
    with pytest.raises(ResourceExhaustedError) as info:
        wait_until_feasible(
            scaling, lambda: ({"CPU": 1.0}, 1), 2, poll_s=0.5, sleep=clock.sleep, clock=lambda: clock.now
        )
    assert clock.slept == [0.5] * 4
    assert info.value.field == "scaling_config.num_workers"
    assert info.value.message.endswith(
        "2 CPU (cluster has 1); lower scaling_config.num_workers or "
        "resources_per_worker (after waiting 2 s for nodes to join)"
    )

    clock = FakeClock()
    with pytest.raises(ResourceExhaustedError) as info:  # wait_s=0 refuses without a pause
        wait_until_feasible(scaling, lambda: ({"CPU": 1.0}, 1), 0, sleep=clock.sleep, clock=lambda: clock.now)
    assert "waiting" not in info.value.message and clock.slept == []


def _upload_parts(data: bytes, declared_size: int, sha: str):
    yield coordinator_pb2.UploadDatasetRequest(
        header=coordinator_pb2.UploadDatasetHeader(sha256=sha, size_bytes=declared_size)
    )
    yield coordinator_pb2.UploadDatasetRequest(chunk=data)


def test_truncated_upload_stores_nothing(stub):
    data = table_to_ipc(pa.table({"x": list(range(1000))}))
    sha = hashlib.sha256(data).hexdigest()
    err = _call_error(stub.UploadDataset, _upload_parts(data[: len(data) // 2], len(data), sha))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"upload truncated: got {len(data) // 2} of {len(data)} bytes" in err.details()
    missing = _call_error(stub.GetDataset, coordinator_pb2.GetDatasetRequest(sha256=sha))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    # The whole upload then goes through, and a second one is deduplicated.
    info = stub.UploadDataset(_upload_parts(data, len(data), sha))
    assert (info.num_rows, list(info.columns)) == (1000, ["x"])
    assert stub.UploadDataset(_upload_parts(data, len(data), sha)).sha256 == sha


def test_upload_with_wrong_hash_or_not_arrow(stub):
    data = b"not arrow at all"
    err = _call_error(stub.UploadDataset, _upload_parts(data, len(data), "a" * 64))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field_of(err) == "header.sha256"
    err = _call_error(stub.UploadDataset, _upload_parts(data, len(data), hashlib.sha256(data).hexdigest()))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "not an Arrow IPC stream" in err.details()


def test_bad_page_token_and_watch_offset(stub):
    err = _call_error(stub.ListRuns, coordinator_pb2.ListRunsRequest(page_token="%%%"))
    assert (err.code(), field_of(err)) == (grpc.StatusCode.INVALID_ARGUMENT, "page_token")


def test_pickled_code_refused_when_disabled(coordinator, stub):
    runs = coordinator.server.runs
    runs.checks.allow_pickled_code = False
    try:
        request = coordinator_pb2.FitRequest(framework="torch")
        request.data_parallel.train_loop.pickled_function = b"\x80\x04N."
        err = _call_error(stub.Fit, request)
    finally:
        runs.checks.allow_pickled_code = True
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert field_of(err) == "data_parallel.train_loop.pickled_function"


def test_strict_spread_over_more_workers_than_nodes(stub, uploaded):
    request = _gbdt_request(uploaded)
    request.scaling_config.num_workers = 2
    request.scaling_config.placement_strategy = "STRICT_SPREAD"
    err = _call_error(stub.Fit, request)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the cluster has 1" in err.details()
    assert field_of(err) == "scaling_config.placement_strategy"
