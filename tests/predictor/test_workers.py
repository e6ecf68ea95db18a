"""``--workers N``: the real predictor as N processes on one gRPC and one REST port, kept by a parent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from conftest import commit_checkpoint

from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.storage import Store
from trainwire_predictor.models import ModelRef
from trainwire_predictor.statistics import SharedStatistics, Timing
from trainwire_predictor.workers import PID_HEADER, GenerationPublisher, GenerationSnapshots

pytestmark = pytest.mark.timeout(180)

MODEL = "workers-xgb"
ROW = [0.5] * 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_shared_statistics_sum_every_process_file(tmp_path) -> None:
    """Two recorders on one folder (two workers): each answers with both's figures, a later one's too."""
    ref = ModelRef("run-1", "model", "c1", number=1)
    first, second = SharedStatistics(str(tmp_path)), SharedStatistics(str(tmp_path))
    timing = Timing()
    timing.rows, timing.queue_ns, timing.infer_ns = 3, 10, 100
    for _ in range(2):
        first.success(ref, timing, 1_000)
    first.execution(ref, 3, 1, 100, 1)
    second.success(ref, timing, 2_000)
    second.failure(ref, 500)
    second.execution(ref, 3, 2, 200, 2)
    second.execution(ref, 6, 2, 300, 2)
    for stats in (first, second, SharedStatistics(str(tmp_path))):
        (m,) = stats.records()
        assert (m.name, m.version) == ("model", "1")
        assert (m.success.count, m.success.ns) == (3, 4_000)
        assert (m.fail.count, m.fail.ns) == (1, 500)
        assert (m.queue.count, m.queue.ns, m.compute_infer.ns) == (3, 30, 300)
        assert (m.inference_count, m.execution_count) == (9, 3)
        assert {size: (b.compute_infer.count, b.compute_infer.ns) for size, b in m.batches.items()} == {
            3: (2, 300),
            6: (1, 300),
        }
    assert stats.records("run-2") == [] and stats.records("run-1", "c2") == []
    assert stats.records("run-1", "c1", name="alias")[0].name == "alias"


def test_generation_snapshots_sum_the_workers_gauges(tmp_path) -> None:
    """Each worker's generation figures (a snapshot file) are summed by metric and labels at the parent's scrape."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class Engines:
        def __init__(self, waiting: int, tokens: int, tenant: str) -> None:
            self.figures = (waiting, tokens, tenant)

        def collect(self) -> Iterator[Any]:
            waiting, tokens, tenant = self.figures
            gauge = GaugeMetricFamily("trainwire_generate_waiting", "waiting", labels=["model", "tenant"])
            gauge.add_metric(["lm", tenant], waiting)
            counter = CounterMetricFamily("trainwire_generate_tokens", "tokens", labels=["model", "tenant"])
            counter.add_metric(["lm", tenant], tokens)
            yield from (gauge, counter)

    folder = tmp_path / "generation"
    for index, (waiting, tokens, tenant) in enumerate([(2, 10, "alice"), (3, 5, "alice"), (1, 7, "bob")]):
        GenerationPublisher(Engines(waiting, tokens, tenant), str(folder / f"{index}.json")).publish()
    registry = CollectorRegistry()
    registry.register(GenerationSnapshots(str(folder)))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'trainwire_generate_waiting{model="lm",tenant="alice"} 5.0' in text
    assert 'trainwire_generate_waiting{model="lm",tenant="bob"} 1.0' in text
    assert 'trainwire_generate_tokens_total{model="lm",tenant="alice"} 15.0' in text


@pytest.fixture(scope="module")
def group(tmp_path_factory, local_booster) -> Iterator[dict[str, Any]]:
    """``python -m trainwire_predictor --workers 2`` on a store of its own; stopped by SIGTERM at the end."""
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    store = Store(str(tmp_path_factory.mktemp("workers") / "store"))
    commit_checkpoint(store, "run-workers", MODEL, "c1", XGBoostCheckpoint.from_model(local_booster).path)
    http_port, metrics_port = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("workers-log") / "predictor.log"
    env = {**os.environ, "TRAINWIRE_PREDICTOR_COMPILE_TREE_MODELS": "false"}
    args = ["--workers", "2", "--port", "0", "--http-port", str(http_port), "--metrics-port", str(metrics_port)]
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainwire_predictor", *args, "--store", store.uri, "--worker-threads", "1"],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            text=True,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("trainwire predictor listening on 127.0.0.1:"), log.read_text()[-3000:]
        yield {
            "proc": proc,
            "grpc": line.rsplit(" ", 1)[1].strip(),
            "http": f"http://127.0.0.1:{http_port}",
            "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
            "log": log,
        }
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _rest_infer(base: str) -> int:
    """One request on a connection of its own (the kernel picks a worker per connection); the answering pid."""
    body = {"inputs": [{"name": "input", "datatype": "FP64", "shape": [2, 30], "data": ROW * 2}]}
    with httpx.Client(timeout=30) as client:
        answer = client.post(f"{base}/v2/models/{MODEL}/infer", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["shape"] == [2]
    return int(answer.headers[PID_HEADER])


def _grpc_infer(address: str) -> None:
    request = pb.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="input", datatype="FP64", shape=[1, 30])
    tensor.contents.fp64_contents.extend(ROW)
    with grpc.insecure_channel(address) as channel:
        answer = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert list(answer.outputs[0].shape) == [1]


def _until_pids(base: str, want: int, exclude: frozenset[int] = frozenset(), limit: int = 300) -> tuple[set[int], int]:
    """Sends REST requests until ``want`` distinct pids (none of ``exclude``) have answered; (pids, requests)."""
    pids: set[int] = set()
    for sent in range(1, limit + 1):
        pid = _rest_infer(base)
        assert pid not in exclude, "a killed worker answered"
        pids.add(pid)
        if len(pids) >= want:
            return pids, sent
    raise AssertionError(f"only pids {pids} answered {limit} requests")


def _counted(group: dict[str, Any]) -> tuple[int, int, int]:
    """Successes as REST statistics, gRPC ModelStatistics and Prometheus see them, and the rows counted."""
    (rest,) = httpx.get(f"{group['http']}/v2/models/{MODEL}/stats", timeout=30).json()["model_stats"]
    with grpc.insecure_channel(group["grpc"]) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        (by_grpc,) = stub.ModelStatistics(pb.ModelStatisticsRequest(name=MODEL), timeout=30).model_stats
    text = httpx.get(group["metrics"], timeout=30).text
    (prom,) = [
        line for line in text.splitlines() if line.startswith(f'nv_inference_request_success_total{{model="{MODEL}"')
    ]
    assert rest["inference_stats"]["success"]["count"] == by_grpc.inference_stats.success.count
    return rest["inference_stats"]["success"]["count"], by_grpc.inference_count, int(float(prom.split()[-1]))


def test_two_workers_answer_and_count_every_request_once(group) -> None:
    pids, rest_requests = _until_pids(group["http"], 2)
    for _ in range(5):
        _grpc_infer(group["grpc"])
    success, rows, prom = _counted(group)
    total = rest_requests + 5
    assert (success, prom) == (total, total)
    assert rows == rest_requests * 2 + 5
    group["pids"], group["total"] = pids, total


def test_a_killed_worker_is_replaced_and_its_counts_stay(group) -> None:
    pids: set[int] = group.get("pids") or _until_pids(group["http"], 2)[0]
    counted_before = _counted(group)[0]
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while _alive(victim) and time.monotonic() < deadline:
        time.sleep(0.1)
    # The replacement comes up on the same ports; the survivor answers meanwhile.
    new_pids: set[int] = set()
    sent = 0
    while len(new_pids | {p for p in pids if p != victim}) < 2 or not new_pids:
        assert time.monotonic() < deadline, f"no replacement answered: {group['log'].read_text()[-3000:]}"
        try:
            pid = _rest_infer(group["http"])
        except httpx.TransportError:
            continue  # a connection the dead worker had accepted, or a refused one in the instant before
        sent += 1
        assert pid != victim
        if pid not in pids:
            new_pids.add(pid)
    success, _, prom = _counted(group)
    assert success == prom == counted_before + sent
    assert "exited with -9; restarting" in group["log"].read_text()


def test_sigterm_to_the_parent_stops_every_worker(group) -> None:
    pids: set[int] = group.get("pids") or set()
    pids |= _until_pids(group["http"], 2)[0]
    proc = group["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{group['http']}/v2/health/live", timeout=5)
