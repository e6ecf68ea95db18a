"""The predictor's Prometheus endpoint (``--metrics-port``), scraped with prometheus_client's parser (issue 8)."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from conftest import commit_checkpoint
from prometheus_client.parser import text_string_to_metric_families

from trainwire_core.errors import InvalidArgumentError, NotFoundError
from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(180)

MODEL = "metrics-model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory, local_booster):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path_factory.mktemp("metrics") / "store"))
    path = XGBoostCheckpoint.from_model(local_booster).path
    manager = commit_checkpoint(store, "run-metrics", MODEL, "c1", path, 1)
    commit_checkpoint(store, "run-metrics", MODEL, "c2", path, 2, manager=manager)
    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, metrics_port=free_port()))
    thread.start()
    yield thread
    thread.stop()


def scrape(address: str) -> dict[str, dict[tuple, float]]:
    """``{sample name: {(model, version[, le]): value}}`` of the nv_inference_* samples."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("nv_inference_"):
            continue
        for s in family.samples:
            key = (s.labels["model"], s.labels["version"]) + ((s.labels["le"],) if "le" in s.labels else ())
            out.setdefault(s.name, {})[key] = s.value
    return out


def test_metrics_count_successes_failures_rows_and_latency(served, valid_x):
    from trainwire.predictor_client import PredictorClient

    address = served.server.metrics_address
    assert address
    with PredictorClient(served.server.address, timeout_s=30) as client:
        for rows in (5, 7, 1):
            client.predict(MODEL, valid_x.iloc[:rows], version="c1")
        client.predict(MODEL, valid_x.iloc[:4])  # the latest: c2
        with pytest.raises(InvalidArgumentError):
            client.predict(MODEL, valid_x.iloc[:3, :5], version="c1")  # too few columns
        with pytest.raises(NotFoundError):
            client.predict("no-such-model", valid_x.iloc[:3])  # counts for no model
    m = scrape(address)
    c1, c2 = (MODEL, "1"), (MODEL, "2")  # labelled by number, as Triton labels its versions
    assert m["nv_inference_request_success_total"] == {c1: 3.0, c2: 1.0}
    assert m["nv_inference_request_failure_total"] == {c1: 1.0, c2: 0.0}
    assert m["nv_inference_count_total"] == {c1: 13.0, c2: 4.0}
    assert m["nv_inference_exec_count_total"] == {c1: 3.0, c2: 1.0}
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert m[f"{name}_count"] == {c1: 3.0, c2: 1.0}, name
        assert m[f"{name}_bucket"][c1 + ("+Inf",)] == 3.0, name
    assert m["nv_inference_request_duration_us_sum"][c1] > m["nv_inference_compute_infer_duration_us_sum"][c1] > 0
    # Rows per model call: 1, 5 and 7 for c1.
    batch = m["nv_inference_batch_size_bucket"]
    assert batch[c1 + ("1.0",)] == 1.0 and batch[c1 + ("4.0",)] == 1.0 and batch[c1 + ("8.0",)] == 3.0
    assert m["nv_inference_batch_size_sum"][c1] == 13.0


def test_statistics_and_metrics_agree(served):
    m = scrape(served.server.metrics_address)
    stats = {(s.name, s.version): s for s in served.server.servicer.statistics.snapshot()}
    for key, value in m["nv_inference_count_total"].items():
        assert stats[key].inference_count == value
        assert stats[key].execution_count == m["nv_inference_exec_count_total"][key]
        assert stats[key].inference_stats.success.count == m["nv_inference_request_success_total"][key]
        assert stats[key].inference_stats.fail.count == m["nv_inference_request_failure_total"][key]


def test_metrics_are_off_by_default(tmp_path):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=str(tmp_path / "store")))
    thread.start()
    try:
        assert thread.server.metrics is None and thread.server.metrics_address == ""
    finally:
        thread.stop()


def test_metrics_server_stops_with_the_predictor(tmp_path):
    """Before any request the endpoint answers with no samples; after stop the port serves nothing."""
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    port = free_port()
    thread = PredictorThread(PredictorSettings(port=0, store=str(tmp_path / "store"), metrics_port=port))
    thread.start()
    assert thread.server.metrics_address.endswith(f":{port}")
    assert scrape(thread.server.metrics_address) == {}
    thread.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
