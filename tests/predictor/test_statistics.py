"""Triton's ModelStatistics RPC, through the real tritonclient's ``get_inference_statistics`` (issue 8).

tritonclient runs in this process, beside trainwire's stubs (see test_coexistence.py).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import commit_checkpoint

from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(180)

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

MODEL = "stats-model"


@pytest.fixture(scope="module")
def address(tmp_path_factory, local_booster):
    """A predictor serving one run with two versions (c1, c2; c2 is the latest)."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path_factory.mktemp("stats") / "store"))
    path = XGBoostCheckpoint.from_model(local_booster).path
    manager = commit_checkpoint(store, "run-stats", MODEL, "c1", path, 1)
    commit_checkpoint(store, "run-stats", MODEL, "c2", path, 2, manager=manager)
    thread = PredictorThread(PredictorSettings(port=0, store=store.uri))
    yield thread.start()
    thread.stop()


@pytest.fixture(scope="module")
def served(address):
    """tritonclient's gRPC client of that predictor."""
    client = grpcclient.InferenceServerClient(address)
    yield client
    client.close()


def inputs(frame) -> list:
    out = []
    for col in frame.columns:
        tensor = grpcclient.InferInput(col, [len(frame)], "FP64")
        tensor.set_data_from_numpy(frame[col].to_numpy(np.float64))
        out.append(tensor)
    return out


def stats_of(client, name: str = "", version: str = "") -> list[dict]:
    return client.get_inference_statistics(name, version, as_json=True).get("model_stats", [])


def count(d: dict, key: str) -> int:
    return int(d.get(key, {}).get("count", 0))


def ns(d: dict, key: str) -> int:
    return int(d.get(key, {}).get("ns", 0))


def test_statistics_count_requests_rows_and_time_per_version(served, address, valid_x):
    client = served
    assert "statistics" in client.get_server_metadata(as_json=True)["extensions"]
    # Before any request: one zeroed entry for the version the name resolves to.
    (before,) = stats_of(client, MODEL)
    assert before["name"] == MODEL and before["version"] == "2"  # c2's number: Triton's versions are integers
    assert int(before.get("inference_count", 0)) == 0 and int(before.get("execution_count", 0)) == 0

    started_ms = time.time() * 1000
    for rows in (5, 7, 1):
        client.infer(MODEL, inputs(valid_x.iloc[:rows]), model_version="c1")
    client.infer(MODEL, inputs(valid_x.iloc[:4]), model_version="c2")
    with pytest.raises(InferenceServerException):
        client.infer(MODEL, inputs(valid_x.iloc[:3, :5]), model_version="c1")  # too few columns
    with pytest.raises(InferenceServerException):
        client.infer("no-such-model", inputs(valid_x.iloc[:3]))  # counts for no model

    (c1,) = stats_of(client, MODEL, "c1")
    assert c1["name"] == MODEL and c1["version"] == "1"
    assert int(c1["inference_count"]) == 13
    assert int(c1["execution_count"]) == 3
    assert int(c1["last_inference"]) >= started_ms - 1000
    s = c1["inference_stats"]
    assert count(s, "success") == 3 and count(s, "fail") == 1
    for part in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert count(s, part) == 3, part
    assert ns(s, "success") > 0 and ns(s, "fail") > 0 and ns(s, "compute_infer") > 0
    assert ns(s, "success") >= ns(s, "compute_input") + ns(s, "compute_infer") + ns(s, "compute_output")
    assert count(s, "cache_hit") == 0 and count(s, "cache_miss") == 0
    batches = {int(b["batch_size"]): b for b in c1["batch_stats"]}
    assert sorted(batches) == [1, 5, 7]
    assert all(count(b, "compute_infer") == 1 and ns(b, "compute_infer") > 0 for b in batches.values())

    (c2,) = stats_of(client, MODEL, "c2")
    assert int(c2["inference_count"]) == 4 and count(c2["inference_stats"], "success") == 1
    everything = stats_of(client)
    assert [(m["name"], m["version"]) for m in everything] == [(MODEL, "1"), (MODEL, "2")]
    assert [m["version"] for m in stats_of(client, MODEL)] == ["1", "2"]
    # The run id names the same model.
    assert [m["version"] for m in stats_of(client, "run-stats", "c1")] == ["1"]
    assert stats_of(client, MODEL, "1") == stats_of(client, MODEL, "c1")  # a number is a version too
    # trainwire's SDK reads the same figures.
    from trainwire.predictor_client import PredictorClient

    with PredictorClient(address, timeout_s=10) as sdk:
        assert sdk.inference_statistics(MODEL, "c1") == stats_of(client, MODEL, "c1")


def test_batched_requests_count_each_row_once_and_each_model_call_once(served, valid_x):
    client = served
    (before,) = stats_of(client, MODEL, "c2")
    done: list = []
    sizes = [3, 5, 2, 8, 1, 6, 4, 7]
    for rows in sizes:
        client.async_infer(
            MODEL, inputs(valid_x.iloc[:rows]), lambda result, error: done.append(error), model_version="c2"
        )
    deadline = time.time() + 60
    while len(done) < len(sizes) and time.time() < deadline:
        time.sleep(0.01)
    assert done == [None] * len(sizes)
    (after,) = stats_of(client, MODEL, "c2")
    rows = int(after["inference_count"]) - int(before["inference_count"])
    assert rows == sum(sizes)
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert 1 <= executions <= len(sizes)
    batched_rows = sum(int(b["batch_size"]) * count(b, "compute_infer") for b in after["batch_stats"])
    assert batched_rows == int(after["inference_count"])
    assert sum(count(b, "compute_infer") for b in after["batch_stats"]) == int(after["execution_count"])
    assert count(after["inference_stats"], "success") - count(before["inference_stats"], "success") == len(sizes)


def test_unknown_model_or_version_is_an_error(served):
    with pytest.raises(InferenceServerException, match="not found"):
        served.get_inference_statistics("no-such-model")
    with pytest.raises(InferenceServerException, match="no version"):
        served.get_inference_statistics(MODEL, "c9")
    with pytest.raises(InferenceServerException, match="needs a model name"):
        served.get_inference_statistics("", "c1")
