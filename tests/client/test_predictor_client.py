"""The fast ``PredictorClient`` (issue 8): one 2-D tensor, a learned layout, round robin over replicas, deadlines."""

from __future__ import annotations

import json
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pandas as pd
import pytest
from serving_fixtures import XGB_PARAMS, commit_checkpoint

from trainwire.predictor_client import PredictorClient, decode_response, encode_request, service_config
from trainwire_core.errors import TrainwireError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.inference.codec import datatype_of
from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(300)

XGB = "pred-cancer-xgb"
MODEL = "fast-client-model"


def start_predictor(store: Store):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, index_refresh_s=0.2))
    thread.start()
    return thread


def port_of(thread) -> int:
    return int(thread.server.address.rsplit(":", 1)[1])


def successes(address: str, model: str = MODEL) -> int:
    """Successful inferences a predictor has counted for a model (its ModelStatistics)."""
    with PredictorClient(address, timeout_s=10) as client:
        stats = client.inference_statistics(model)
    return sum(int(s.get("inference_stats", {}).get("success", {}).get("count", 0)) for s in stats)


@pytest.fixture(scope="module")
def fast_store(tmp_path_factory, local_booster):
    """A store serving the in-process booster as MODEL (checkpoint c1)."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    store = Store(str(tmp_path_factory.mktemp("fast-client") / "store"))
    commit_checkpoint(store, "run-fast", MODEL, "c1", XGBoostCheckpoint.from_model(local_booster).path, 1)
    return store


@pytest.fixture(scope="module")
def replicas(fast_store):
    """Two predictor replicas on one store (each test may stop them; stopping twice is harmless)."""
    threads = [start_predictor(fast_store), start_predictor(fast_store)]
    stopped: set[int] = set()

    def stop(i: int) -> None:
        if i not in stopped:
            stopped.add(i)
            threads[i].stop()

    yield threads, stop
    for i in range(len(threads)):
        stop(i)


def local_predict(booster, frame: pd.DataFrame) -> pd.DataFrame:
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    return XGBoostPredictor.from_checkpoint(XGBoostCheckpoint.from_model(booster)).predict(frame)


# --- one 2-D tensor -----------------------------------------------------------------
def test_2d_request_equals_per_column_and_in_process(predictor_client, predictor_address, xgb_result, valid_x):
    """The trained (Fit) model: one [rows, 30] FP64 tensor gives exactly the per-column and in-process answers."""
    from trainwire.xgboost.predictor import XGBoostPredictor

    expected = XGBoostPredictor.from_checkpoint(xgb_result.checkpoint).predict(valid_x)
    request, layout = predictor_client._encode(XGB, valid_x, "", "", None)
    assert layout is not None and len(request.inputs) == 1 and len(request.raw_input_contents) == 1
    assert request.inputs[0].datatype == "FP64" and list(request.inputs[0].shape) == [len(valid_x), 30]
    pd.testing.assert_frame_equal(predictor_client.predict(XGB, valid_x), expected)

    channel = grpc.insecure_channel(predictor_address)
    try:
        per_column = decode_response(pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(encode_request(XGB, valid_x)))
    finally:
        channel.close()
    pd.testing.assert_frame_equal(per_column, expected)

    # The caller's column order does not matter: the client sends the model's.
    shuffled = valid_x[list(valid_x.columns[::-1])]
    request, _ = predictor_client._encode(XGB, shuffled, "", "", None)
    assert len(request.inputs) == 1
    pd.testing.assert_frame_equal(predictor_client.predict(XGB, shuffled), expected)
    columns = {c: valid_x[c].to_numpy() for c in valid_x.columns}
    assert len(predictor_client._encode(XGB, columns, "", "", None)[0].inputs) == 1
    pd.testing.assert_frame_equal(predictor_client.predict(XGB, columns), expected)
    pd.testing.assert_frame_equal(predictor_client.predict(XGB, valid_x.to_numpy()), expected)
    batches = [valid_x.iloc[i : i + 40] for i in range(0, len(valid_x), 40)]
    pd.testing.assert_frame_equal(pd.concat(list(predictor_client.stream(XGB, batches)), ignore_index=True), expected)


def test_mixed_dtypes_and_other_columns_go_per_column(replicas, local_booster, valid_x):
    threads, _ = replicas
    with PredictorClient(threads[0].server.address, timeout_s=30) as client:
        mixed = valid_x.astype({valid_x.columns[0]: np.float32, valid_x.columns[1]: np.int64})
        request, layout = client._encode(MODEL, mixed, "", "", None)
        # The model takes one 2-D tensor, but this frame has three dtypes.
        assert client._layouts[(MODEL, "")] is not None and layout is None
        assert len(request.inputs) == 30 and len(request.raw_input_contents) == 30
        pd.testing.assert_frame_equal(client.predict(MODEL, mixed), local_predict(local_booster, mixed))

        plain = valid_x.iloc[:32]
        expected = local_predict(local_booster, plain)
        pd.testing.assert_frame_equal(client.predict(MODEL, plain), expected)
        # A missing or an extra column goes per column, so the predictor names it.
        for frame in (plain.iloc[:, 1:], plain.assign(extra=1.0)):
            assert len(client._encode(MODEL, frame, "", "", None)[0].inputs) == frame.shape[1]
            with pytest.raises(TrainwireError) as info:
                client.predict(MODEL, frame)
            assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        # Frames the client returns are the caller's to change.
        out = client.predict(MODEL, plain)
        out.iloc[0, 0] = 5.0
        assert out.iloc[0, 0] == 5.0


def test_changed_columns_are_never_scored_in_the_old_order(tmp_path, cancer_data, features, valid_x):
    """A new checkpoint that takes the columns in another order: the client notices it before answering."""
    import xgboost

    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    train = cancer_data[0]
    first = xgboost.train(XGB_PARAMS, xgboost.DMatrix(train[features], label=train["target"]), 4)
    reordered = features[::-1]
    second = xgboost.train(XGB_PARAMS, xgboost.DMatrix(train[reordered], label=train["target"]), 6)
    store = Store(str(tmp_path / "store"))
    manager = commit_checkpoint(store, "run-swap", "swap", "c1", XGBoostCheckpoint.from_model(first).path, 1)
    thread = start_predictor(store)
    try:
        rows = valid_x.iloc[:32]
        with PredictorClient(thread.server.address, timeout_s=30) as client:
            pd.testing.assert_frame_equal(client.predict("swap", rows), local_predict(first, rows))
            commit_checkpoint(
                store, "run-swap", "swap", "c2", XGBoostCheckpoint.from_model(second).path, 2, manager=manager
            )
            want_first, want_second = local_predict(first, rows), local_predict(second, rows)
            deadline = time.monotonic() + 30
            while True:
                out = client.predict("swap", rows)
                if np.allclose(out["predictions"], want_second["predictions"], rtol=1e-6):
                    break
                pd.testing.assert_frame_equal(out, want_first)  # the old checkpoint, never a mix
                assert time.monotonic() < deadline, "the predictor never served c2"
                time.sleep(0.1)
            # The new layout is learned: the next call is one 2-D tensor in the new order.
            pd.testing.assert_frame_equal(client.predict("swap", rows), want_second)
            request, layout = client._encode("swap", rows, "", "", None)
            assert len(request.inputs) == 1 and list(layout.columns) == reordered
    finally:
        thread.stop()


def test_fast_decode_equals_decode_response():
    client = PredictorClient("127.0.0.1:1", timeout_s=1)
    try:
        for dtype, shape in ((np.float32, [4]), (np.float64, [4, 1]), (np.int64, [4]), (np.bool_, [4])):
            response = pb.ModelInferResponse()
            arr = np.arange(4).astype(dtype)
            response.outputs.add(name="predictions", datatype=datatype_of(arr.dtype), shape=shape)
            response.raw_output_contents.append(arr.tobytes())
            pd.testing.assert_frame_equal(client._decode(response), decode_response(response))
    finally:
        client.close()


# --- replicas, balancing, deadlines ----------------------------------------------------
def test_service_config_balances_round_robin_and_retries_unavailable():
    config = json.loads(service_config())
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    retry = config["methodConfig"][0]["retryPolicy"]
    assert retry["retryableStatusCodes"] == ["UNAVAILABLE"] and 2 <= retry["maxAttempts"] <= 5
    assert "methodConfig" not in json.loads(service_config("pick_first", max_attempts=1))


def test_round_robin_over_two_replicas_and_one_going_away(replicas, local_booster, valid_x):
    threads, stop = replicas
    addresses = [t.server.address for t in threads]
    rows = valid_x.iloc[:32]
    expected = local_predict(local_booster, rows)
    before = [successes(a) for a in addresses]
    target = "ipv4:" + ",".join(f"127.0.0.1:{port_of(t)}" for t in threads)
    with PredictorClient(target, timeout_s=5) as client:
        for _ in range(20):
            pd.testing.assert_frame_equal(client.predict(MODEL, rows), expected)
        after = [successes(a) for a in addresses]
        got = [a - b for a, b in zip(after, before)]
        assert sum(got) == 20 and min(got) >= 5, got  # both replicas answered, about half each

        stop(0)
        for _ in range(10):
            start = time.monotonic()
            pd.testing.assert_frame_equal(client.predict(MODEL, rows), expected)
            assert time.monotonic() - start < client.timeout_s
        assert successes(addresses[1]) - after[1] == 10


def test_dns_target_is_accepted(replicas, local_booster, valid_x):
    threads, _ = replicas
    live = threads[1]  # no test stops this one
    rows = valid_x.iloc[:8]
    with PredictorClient(f"dns:///localhost:{port_of(live)}", timeout_s=10) as client:
        pd.testing.assert_frame_equal(client.predict(MODEL, rows), local_predict(local_booster, rows))
        assert client.is_server_live()


def test_no_call_outlives_its_deadline():
    """A replica that never answers, and an address where nothing listens: both fail within timeout_s."""
    started = threading.Event()

    def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
        started.set()
        time.sleep(3)
        return b""

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(hang)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with PredictorClient(f"127.0.0.1:{port}", timeout_s=0.5) as client:
            start = time.monotonic()
            with pytest.raises(TrainwireError) as info:
                client.predict("m", np.zeros((2, 3)))
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and started.is_set()
            assert time.monotonic() - start < 1.5
    finally:
        server.stop(0)
    with PredictorClient(f"ipv4:127.0.0.1:{port}", timeout_s=0.5) as client:
        start = time.monotonic()
        with pytest.raises(TrainwireError) as info:
            client.predict("m", np.zeros((2, 3)))
        assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        assert time.monotonic() - start < 1.5
