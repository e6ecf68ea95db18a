"""Predictor throughput and latency, side by side with MLServer and a bare gRPC server.

Serves one XGBoost booster (breast cancer, 30 features) three ways on loopback:

- trainwire: ``python -m trainwire_predictor`` on a store holding the booster as a committed checkpoint;
- MLServer: ``mlserver`` + ``mlserver-xgboost`` serving the same ``model.ubj`` over gRPC (its own
  virtualenv, created on first use under ~/.cache/trainwire-bench, as MLServer needs protobuf 6);
- bare: a grpc.aio server answering ModelInfer with a fixed response (the transport's ceiling).

One load generator (grpc.aio, the same serialized 32-row raw FP64 ModelInferRequest for all) runs
at concurrency 1, 8 and 32 for a few seconds each and reports requests/s and p50/p99 latency.

Run: .venv/bin/python bench/predictor_throughput.py [--seconds 3] [--skip-mlserver]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METHOD = "/inference.GRPCInferenceService/ModelInfer"
ROWS = 32
CONCURRENCY = (1, 8, 32)
MLSERVER_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trainwire-bench" / "mlserver-venv"
MLSERVER_PACKAGES = ["mlserver==1.7.1", "mlserver-xgboost==1.7.1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the model and the request ----------------------------------------------------
def train_model(workdir: Path) -> tuple[Path, bytes]:
    """Trains the booster, commits it to a trainwire store, and builds the request bytes."""
    import numpy as np
    import xgboost
    from sklearn.datasets import load_breast_cancer

    from trainwire.config import CheckpointConfig
    from trainwire.inference import grpc_service_pb2 as pb
    from trainwire.storage import Store
    from trainwire_coordinator.checkpoint_manager import CheckpointManager

    data = load_breast_cancer()
    x, y = data.data, data.target
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 4}, xgboost.DMatrix(x, label=y), 20)
    model_dir = workdir / "model"
    model_dir.mkdir()
    booster.save_model(str(model_dir / "model.ubj"))
    store = Store(str(workdir / "store"))
    manager = CheckpointManager(store, "bench-run", "cancer", CheckpointConfig())
    manager.commit("c1", 1, {}, store.upload_dir(model_dir, store.checkpoint_dir("bench-run", "c1")))

    rows = np.ascontiguousarray(x[:ROWS], dtype="<f8")
    request = pb.ModelInferRequest(model_name="cancer")
    request.inputs.add(name="input", datatype="FP64", shape=rows.shape)
    request.raw_input_contents.append(rows.tobytes())
    return model_dir, request.SerializeToString()


# --- servers --------------------------------------------------------------------
def bare_server(port: int) -> None:
    """A grpc.aio server that answers ModelInfer with fixed bytes (no model, no parsing)."""
    import grpc
    import numpy as np

    from trainwire.inference import grpc_service_pb2 as pb

    response = pb.ModelInferResponse(model_name="cancer", model_version="c1")
    response.outputs.add(name="predictions", datatype="FP32", shape=[ROWS])
    response.raw_output_contents.append(np.zeros(ROWS, dtype="<f4").tobytes())
    payload = response.SerializeToString()

    async def infer(request: bytes, context: object) -> bytes:
        return payload

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
        )
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def ensure_mlserver() -> Path:
    """MLServer's own virtualenv (it pins protobuf 6, trainwire uses 7)."""
    mlserver = MLSERVER_VENV / "bin" / "mlserver"
    marker = MLSERVER_VENV / "installed.txt"  # written only after a complete install
    if marker.exists() and marker.read_text() == " ".join(MLSERVER_PACKAGES):
        return mlserver
    print(f"creating {MLSERVER_VENV} and installing {' '.join(MLSERVER_PACKAGES)} (once) ...", flush=True)
    MLSERVER_VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(MLSERVER_VENV)], check=True)
    pip = [str(MLSERVER_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *MLSERVER_PACKAGES, "xgboost"], check=True)
    marker.write_text(" ".join(MLSERVER_PACKAGES))
    return mlserver


def mlserver_dir(workdir: Path, model_dir: Path, grpc_port: int) -> Path:
    root = workdir / "mlserver"
    (root / "cancer").mkdir(parents=True)
    shutil.copy(model_dir / "model.ubj", root / "cancer" / "model.ubj")
    settings = {
        "grpc_port": grpc_port,
        "http_port": free_port(),
        "metrics_port": free_port(),
        "metrics_endpoint": None,
        "parallel_workers": 0,
        "debug": False,
        "host": "127.0.0.1",
    }
    (root / "settings.json").write_text(json.dumps(settings))
    model = {"name": "cancer", "implementation": "mlserver_xgboost.XGBoostModel", "parameters": {"uri": "./model.ubj"}}
    (root / "cancer" / "model-settings.json").write_text(json.dumps(model))
    return root


def wait_ready(port: int, request: bytes, timeout_s: float = 180.0) -> None:
    """Waits until ModelInfer answers."""
    import grpc

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                channel.unary_unary(METHOD)(request, timeout=5)
                return
        except grpc.RpcError as exc:
            last = exc
            time.sleep(0.5)
    raise RuntimeError(f"server on port {port} never answered: {last}")


# --- load ---------------------------------------------------------------------
def load(port: int, concurrency: int, seconds: float, warmup_s: float, request: bytes) -> dict[str, float]:
    """Closed-loop load from `concurrency` callers; returns requests/s and latency percentiles (ms)."""
    import grpc
    import numpy as np

    async def main() -> dict[str, float]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(METHOD)
            latencies: list[float] = []
            errors = 0
            start = time.perf_counter()
            measure_from = start + warmup_s
            stop_at = measure_from + seconds

            async def caller() -> None:
                nonlocal errors
                while (now := time.perf_counter()) < stop_at:
                    try:
                        await call(request, timeout=10)
                    except grpc.RpcError:
                        errors += 1
                    done = time.perf_counter()
                    if now >= measure_from:
                        latencies.append(done - now)

            await asyncio.gather(*(caller() for _ in range(concurrency)))
            lat = np.array(latencies) * 1000
            return {
                "rps": len(lat) / seconds,
                "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
                "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
                "errors": errors,
            }

    return asyncio.run(main())


def load_in_subprocess(port: int, concurrency: int, seconds: float, warmup_s: float, request_file: Path) -> dict:
    # A separate process, so the load generator never shares a GIL with a server under test.
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--load",
            str(port),
            str(concurrency),
            str(seconds),
            str(warmup_s),
            str(request_file),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per cell")
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--skip-mlserver", action="store_true")
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server)
        return
    if args.load:
        port, conc, secs, warm, request_file = args.load
        result = load(int(port), int(conc), float(secs), float(warm), Path(request_file).read_bytes())
        print(json.dumps(result))
        return

    workdir = Path(tempfile.mkdtemp(prefix="trainwire-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        model_dir, request = train_model(workdir)
        request_file = workdir / "request.bin"
        request_file.write_bytes(request)
        servers: dict[str, int] = {}

        port = free_port()
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "trainwire_predictor", "--port", str(port), "--store", str(workdir / "store")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        servers["trainwire"] = port
        if not args.skip_mlserver:
            port = free_port()
            mlserver = ensure_mlserver()
            log = open(workdir / "mlserver.log", "w")  # noqa: SIM115 - lives as long as the server
            procs.append(
                subprocess.Popen(
                    [str(mlserver), "start", str(mlserver_dir(workdir, model_dir, port))], stdout=log, stderr=log
                )
            )
            servers["mlserver"] = port
        port = free_port()
        procs.append(
            subprocess.Popen([sys.executable, __file__, "--bare-server", str(port)], stdout=subprocess.DEVNULL)
        )
        servers["bare"] = port
        for port in servers.values():
            wait_ready(port, request)

        results: dict[tuple[str, int], dict] = {}
        for conc in CONCURRENCY:
            for name, port in servers.items():
                results[(name, conc)] = load_in_subprocess(port, conc, args.seconds, args.warmup_s, request_file)

        print(f"\nXGBoost (breast cancer, 20 trees), {ROWS}-row raw FP64 requests, loopback, {args.seconds:.0f} s/cell")
        print(f"{'server':<10} {'conc':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
        for (name, conc), r in results.items():
            print(f"{name:<10} {conc:>4} {r['rps']:>9.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>6}")
        print("\nratios (trainwire / peer)")
        for conc in CONCURRENCY:
            tw = results[("trainwire", conc)]
            parts = [f"conc {conc:>2}: {tw['rps'] / results[('bare', conc)]['rps']:.2f}x of bare throughput"]
            if ("mlserver", conc) in results:
                ml = results[("mlserver", conc)]
                parts.append(f"{tw['rps'] / ml['rps']:.2f}x MLServer throughput")
                parts.append(f"p99 {tw['p99_ms'] / ml['p99_ms']:.2f}x MLServer's")
            print("  " + ", ".join(parts))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
