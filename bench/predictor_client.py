"""What ``PredictorClient.predict`` costs over a prebuilt raw request, before and after issue 8.

Serves one XGBoost booster (breast cancer, 30 named feature columns, 20 trees) from
``python -m trainwire_predictor`` on loopback and calls it one request at a time
(concurrency 1) with 32-row batches three ways, interleaved call by call (a loaded machine's
drift hits every path alike):

- raw: a prebuilt ModelInferRequest (one 2-D FP64 tensor, what bench/predictor_throughput.py
  sends) on a bare stub, the response left undecoded: the floor;
- before: what ``PredictorClient.predict`` did before issue 8: a DataFrame encoded as one tensor
  per column (``encode_request``), answer decoded by ``decode_response``;
- after: ``PredictorClient.predict`` on the same DataFrame (one 2-D tensor from a template).

Prints mean / p50 / p99 latency per path and each path's ratio to raw, side by side.

Run: .venv/bin/python bench/predictor_client.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = 32
MODEL = "cancer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_model(workdir: Path):
    """Trains the booster on a DataFrame (so the model has named columns) and commits it to a store."""
    import xgboost
    from sklearn.datasets import load_breast_cancer

    from trainwire.config import CheckpointConfig
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store

    data = load_breast_cancer(as_frame=True)
    x = data.data
    x.columns = [c.replace(" ", "_") for c in x.columns]
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 4}, xgboost.DMatrix(x, label=data.target), 20)
    model_dir = workdir / "model"
    model_dir.mkdir()
    booster.save_model(str(model_dir / "model.ubj"))
    store = Store(str(workdir / "store"))
    manager = CheckpointManager(store, "bench-run", MODEL, CheckpointConfig())
    manager.commit("c1", 1, {}, store.upload_dir(model_dir, store.checkpoint_dir("bench-run", "c1")))
    return x.iloc[:ROWS].reset_index(drop=True)


def wait_ready(address: str, timeout_s: float = 180.0) -> None:
    from trainwire.predictor_client import PredictorClient

    deadline = time.monotonic() + timeout_s
    with PredictorClient(address, timeout_s=5) as client:
        while True:
            try:
                if client.is_model_ready(MODEL):
                    return
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)


def measure(address: str, frame, calls: int) -> dict[str, list[float]]:
    """Latencies (s) of each path: `calls` rounds, each calling every path once, the order rotating."""
    import grpc
    import numpy as np

    from trainwire.predictor_client import PredictorClient, decode_response, encode_request
    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc

    rows = np.ascontiguousarray(frame.to_numpy(), dtype="<f8")
    raw = pb.ModelInferRequest(model_name=MODEL)
    raw.inputs.add(name="input", datatype="FP64", shape=rows.shape)
    raw.raw_input_contents.append(rows.tobytes())
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    client = PredictorClient(address, timeout_s=30)
    paths = {
        "raw": lambda: stub.ModelInfer(raw, timeout=30),
        "before": lambda: decode_response(stub.ModelInfer(encode_request(MODEL, frame), timeout=30)),
        "after": lambda: client.predict(MODEL, frame),
    }
    expected = client.predict(MODEL, frame)
    assert decode_response(stub.ModelInfer(raw)).equals(expected) and paths["before"]().equals(expected)
    for call in paths.values():  # warm up
        for _ in range(50):
            call()
    times: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths.items())
    for i in range(calls):
        for name, call in order[i % 3 :] + order[: i % 3]:
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    client.close()
    channel.close()
    return times


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="calls per path")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="trainwire-bench-client-"))
    frame = train_model(workdir)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwire_predictor", "--port", str(port), "--store", str(workdir / "store")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = f"127.0.0.1:{port}"
        wait_ready(address)
        times = measure(address, frame, args.calls)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)

    floor_mean = float(np.mean(times["raw"])) * 1e3
    floor_p50 = float(np.median(times["raw"])) * 1e3
    print(
        f"\nXGBoost (breast cancer, 30 columns, 20 trees), {ROWS}-row FP64 DataFrame, loopback, concurrency 1, "
        f"{args.calls} calls per path"
    )
    print(f"{'path':<8} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'mean/raw':>9} {'p50/raw':>8}")
    for name, values in times.items():
        arr = np.asarray(values) * 1e3
        mean = float(arr.mean())
        p50, p99 = np.percentile(arr, [50, 99])
        print(f"{name:<8} {mean:8.3f} {p50:8.3f} {p99:8.3f} {mean / floor_mean:9.2f} {p50 / floor_p50:8.2f}")
    before, after = float(np.mean(times["before"])) * 1e3, float(np.mean(times["after"])) * 1e3
    print(
        f"before/after: {before / after:.2f}x faster; mean overhead over raw "
        f"{before - floor_mean:.3f} ms -> {after - floor_mean:.3f} ms"
    )


if __name__ == "__main__":
    main()
