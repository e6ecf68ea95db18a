"""Predictor throughput and latency, side by side with MLServer and a bare gRPC server.

Serves one XGBoost booster (breast cancer, 30 features, 20 trees) on loopback:

- trainwire: ``python -m trainwire_predictor`` on a store holding the booster as a committed checkpoint;
- trainwire+scaler: the same predictor process serving a second checkpoint, a booster trained on
  the same rows through a fitted Ray Data ``StandardScaler`` saved with it (the predictor applies
  it to every request, so callers send raw features);
- MLServer: ``mlserver`` + ``mlserver-xgboost`` serving the plain ``model.ubj`` over gRPC (its own
  virtualenv, created on first use under ~/.cache/trainwire-bench, as MLServer needs protobuf 6),
  with ``OMP_NUM_THREADS=1``;
- trainwire-threads: a second predictor process with ``TRAINWIRE_PREDICTOR_INLINE_BUDGET_US=0``,
  every model call on its worker threads (what short calls on the event loop save);
- bare: a grpc.aio server answering ModelInfer with a fixed response (the transport's ceiling);
- trainwire-rest and mlserver-rest: the same trainwire predictor process and the same MLServer
  process over REST (KServe v2 JSON on their HTTP ports), the same 32 rows as one [32, 30] FP64
  JSON tensor.

One load generator (grpc.aio in its own process, the same serialized 32-row raw FP64
ModelInferRequest for all, only the model name differs) runs at concurrency 1, 8 and 32;
REST rows get one aiohttp client in its own process, the same JSON body for both servers.
Every cell is measured ``--trials`` times; within a trial the servers take turns in a
rotating order, so load from elsewhere on the machine falls on all of them alike, and
each cell reports the median of its trials.

A last row times the SDK: ``PredictorClient.predict`` on a 32-row DataFrame against the
prebuilt raw request, one call at a time, the two interleaved call by call.

Targets (issue 8): at concurrency 32 trainwire >= 0.8x the bare ceiling and >= 4x MLServer's
throughput; at concurrency 1 >= 0.7x the bare ceiling; p99 <= 0.5x MLServer's at every
concurrency; the scaler model <= 1.2x the plain one's cost; the SDK <= 1.3x the raw request at p50.
Issue 20: REST >= 3x MLServer's REST at concurrency 8 and 32, its c=32 p99 <= 0.5x MLServer's.

With ``--compare-to REV`` (a git revision), the predictor package as it was at REV
(``git archive``) serves too, in its own process, as "before" and "before-rest": the same
cells side by side with the working tree's, so a change's effect is measured under the same load.

Run: .venv/bin/python bench/predictor_throughput.py [--seconds 3] [--trials 3] [--skip-mlserver]
    [--compare-to REV] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

METHOD = "/inference.GRPCInferenceService/ModelInfer"
ROWS = 32
CONCURRENCY = (1, 8, 32)
MODEL = "cancer"
SCALED_MODEL = "cancer-scaled"
FEATURES = [f"f{i}" for i in range(30)]
MLSERVER_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trainwire-bench" / "mlserver-venv"
MLSERVER_PACKAGES = ["mlserver==1.7.1", "mlserver-xgboost==1.7.1"]
PARAMS = {"objective": "binary:logistic", "max_depth": 4}
TREES = 20


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the models and the requests --------------------------------------------------
def _commit(workdir: Path, run: str, booster: Any, preprocessor: Any = None) -> Path:
    """Commits ``booster`` (and a fitted preprocessor) as checkpoint c1 of run ``run``; returns its model dir."""
    import cloudpickle

    from trainwire.checkpoint import METADATA_NAME
    from trainwire.config import CheckpointConfig
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store

    model_dir = workdir / f"model-{run}"
    model_dir.mkdir()
    booster.save_model(str(model_dir / "model.ubj"))
    # What a trainer records: the raw input columns, so callers may send named columns.
    (model_dir / METADATA_NAME).write_text(json.dumps({"feature_columns": FEATURES}))
    store = Store(str(workdir / "store"))
    manager = CheckpointManager(store, f"bench-{run}", run, CheckpointConfig())
    if preprocessor is not None:
        manager.preprocessor_bytes = cloudpickle.dumps(preprocessor)
    manager.commit("c1", 1, {}, store.upload_dir(model_dir, store.checkpoint_dir(f"bench-{run}", "c1")))
    return model_dir


def request_bytes(model: str, rows: Any) -> bytes:
    """A serialized ModelInferRequest: ``rows`` as one 2-D raw FP64 tensor."""
    import numpy as np

    from trainwire_core.inference import grpc_service_pb2 as pb

    rows = np.ascontiguousarray(rows, dtype="<f8")
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="input", datatype="FP64", shape=rows.shape)
    request.raw_input_contents.append(rows.tobytes())
    return request.SerializeToString()


def _cancer() -> tuple[Any, Any]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return data.data, data.target


def train_model(workdir: Path) -> tuple[Path, bytes]:
    """Trains the plain booster, commits it to a trainwire store as run "cancer"; returns its dir and a request."""
    import xgboost

    x, y = _cancer()
    booster = xgboost.train(PARAMS, xgboost.DMatrix(x, label=y), TREES)
    return _commit(workdir, MODEL, booster), request_bytes(MODEL, x[:ROWS])


def train_scaled_model(workdir: Path) -> bytes:
    """Fits a StandardScaler with Ray Data, trains a booster on its output, commits both as "cancer-scaled".

    Returns the request for it: the same raw rows as the plain model's.
    """
    import pandas as pd
    import ray
    import ray.data
    import xgboost
    from ray.data.preprocessors import StandardScaler

    x, y = _cancer()
    frame = pd.DataFrame(x, columns=FEATURES)
    # "local": a Ray of our own, never one another program on this machine started.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        scaler = StandardScaler(columns=FEATURES).fit(ray.data.from_pandas(frame))
    finally:
        ray.shutdown()
    scaled = scaler.transform_batch(frame.copy())[FEATURES].to_numpy()
    booster = xgboost.train(PARAMS, xgboost.DMatrix(scaled, label=y), TREES)
    _commit(workdir, SCALED_MODEL, booster, scaler)
    return request_bytes(SCALED_MODEL, x[:ROWS])


# --- servers --------------------------------------------------------------------
def fixed_response() -> Any:
    """A ModelInferResponse shaped as the predictor's answer to the bench's request (zeros)."""
    import numpy as np

    from trainwire_core.inference import grpc_service_pb2 as pb

    response = pb.ModelInferResponse(model_name=MODEL, model_version="c1")
    response.outputs.add(name="predictions", datatype="FP32", shape=[ROWS])
    response.raw_output_contents.append(np.zeros(ROWS, dtype="<f4").tobytes())
    return response


def bare_server(port: int) -> None:
    """A grpc.aio server that answers ModelInfer with fixed bytes (no model, no parsing)."""
    import grpc

    payload = fixed_response().SerializeToString()

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


def checkout_predictor(workdir: Path, rev: str) -> Path:
    """The predictor package as it was at git revision ``rev``, unpacked under ``workdir``; returns its parent."""
    root = Path(__file__).resolve().parent.parent
    target = workdir / f"predictor-{rev}"
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "predictor/trainwire_predictor"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "predictor"


def start_predictor(
    workdir: Path,
    port: int,
    name: str,
    env: dict[str, str] | None = None,
    http_port: int | None = None,
    extra: list[str] | None = None,
) -> subprocess.Popen:
    """``python -m trainwire_predictor`` on the bench's store, logging to ``<name>.log``; REST too on ``http_port``.

    ``extra`` goes on its command line as it is (``["--workers", "2"]``).
    """
    log = open(workdir / f"{name}.log", "w")  # noqa: SIM115 - lives as long as the server
    http = ["--http-port", str(http_port)] if http_port is not None else []
    store = ["--store", str(workdir / "store")]
    return subprocess.Popen(
        [sys.executable, "-m", "trainwire_predictor", "--port", str(port), *store, *http, *(extra or [])],
        stdout=log,
        stderr=log,
        env={**os.environ, **(env or {})},
    )


def ensure_mlserver(venv: Path = MLSERVER_VENV, packages: tuple[str, ...] = (*MLSERVER_PACKAGES, "xgboost")) -> Path:
    """MLServer's own virtualenv (it pins protobuf 6, trainwire uses 7); returns its ``mlserver``."""
    mlserver = venv / "bin" / "mlserver"
    marker = venv / "installed.txt"  # written only after a complete install
    if marker.exists() and marker.read_text() == " ".join(packages):
        return mlserver
    print(f"creating {venv} and installing {' '.join(packages)} (once) ...", flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *packages], check=True)
    marker.write_text(" ".join(packages))
    return mlserver


def mlserver_dir(
    workdir: Path, model_dir: Path, grpc_port: int, http_port: int, name: str = MODEL, inputs: list[dict] | None = None
) -> Path:
    """MLServer's settings and model folder for the plain booster, served as ``name``.

    ``inputs`` (OIP tensor metadata: name, datatype, shape) go in its model settings, so its
    ModelMetadata names them as trainwire's does (tools that build requests from metadata need them).
    """
    root = workdir / "mlserver"
    (root / name).mkdir(parents=True)
    shutil.copy(model_dir / "model.ubj", root / name / "model.ubj")
    settings = {
        "grpc_port": grpc_port,
        "http_port": http_port,
        "metrics_port": free_port(),
        "metrics_endpoint": None,
        "parallel_workers": 0,
        "debug": False,
        "host": "127.0.0.1",
    }
    (root / "settings.json").write_text(json.dumps(settings))
    model: dict[str, Any] = {
        "name": name,
        "implementation": "mlserver_xgboost.XGBoostModel",
        "parameters": {"uri": "./model.ubj"},
    }
    if inputs:
        model["inputs"] = inputs
    (root / name / "model-settings.json").write_text(json.dumps(model))
    return root


def wait_ready(port: int, request: bytes, timeout_s: float = 180.0) -> None:
    """Waits until ModelInfer answers ``request``."""
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
def summary(latencies: list[float], seconds: float, errors: int) -> dict[str, float]:
    """Requests/s and p50/p99 in ms of one measured window."""
    import numpy as np

    lat = np.array(latencies) * 1000
    return {
        "rps": len(lat) / seconds,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
        "errors": errors,
    }


def load(
    port: int, concurrency: int, seconds: float, warmup_s: float, request: bytes, channels: int = 1
) -> dict[str, float]:
    """Closed-loop load from `concurrency` callers; returns requests/s and latency percentiles (ms).

    ``channels`` > 1 spreads the callers over that many gRPC channels, each its own TCP connection
    (a local subchannel pool: grpc otherwise shares one connection among channels to one address),
    so a ``--workers N`` server, whose kernel hands each connection to one worker, gets them all busy.
    """
    import grpc

    async def main() -> dict[str, float]:
        options = [("grpc.use_local_subchannel_pool", 1)]
        opened = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(max(1, channels))]
        try:
            calls = [channel.unary_unary(METHOD) for channel in opened]
            latencies: list[float] = []
            errors = 0
            start = time.perf_counter()
            measure_from = start + warmup_s
            stop_at = measure_from + seconds

            async def caller(call: Any) -> None:
                nonlocal errors
                while (now := time.perf_counter()) < stop_at:
                    try:
                        await call(request, timeout=10)
                    except grpc.RpcError:
                        errors += 1
                    done = time.perf_counter()
                    if now >= measure_from:
                        latencies.append(done - now)

            await asyncio.gather(*(caller(calls[i % len(calls)]) for i in range(concurrency)))
            return summary(latencies, seconds, errors)
        finally:
            for channel in opened:
                await channel.close()

    return asyncio.run(main())


def rest_body(request: bytes) -> bytes:
    """The JSON body of the same rows as a serialized ModelInferRequest: one [N, F] FP64 tensor."""
    import numpy as np

    from trainwire_core.inference import grpc_service_pb2 as pb

    parsed = pb.ModelInferRequest.FromString(request)
    shape = list(parsed.inputs[0].shape)
    rows = np.frombuffer(parsed.raw_input_contents[0], dtype="<f8")
    tensor = {"name": "input", "datatype": "FP64", "shape": shape, "data": rows.tolist()}
    return json.dumps({"inputs": [tensor]}).encode()


def rest_url(port: int, model: str) -> str:
    return f"http://127.0.0.1:{port}/v2/models/{model}/infer"


def wait_rest_ready(port: int, body: bytes, timeout_s: float = 180.0) -> None:
    """Waits until ``POST /v2/models/<MODEL>/infer`` answers ``body`` with 200."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(rest_url(port, MODEL), body, {"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        time.sleep(0.5)
    raise RuntimeError(f"REST server on port {port} never answered: {last}")


def rest_load(port: int, concurrency: int, seconds: float, warmup_s: float, body: bytes) -> dict[str, float]:
    """``load`` over REST: closed-loop aiohttp callers on kept-alive connections."""
    import aiohttp

    url = rest_url(port, MODEL)
    headers = {"content-type": "application/json"}

    async def main() -> dict[str, float]:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            latencies: list[float] = []
            errors = 0
            start = time.perf_counter()
            measure_from = start + warmup_s
            stop_at = measure_from + seconds

            async def caller() -> None:
                nonlocal errors
                while (now := time.perf_counter()) < stop_at:
                    try:
                        async with session.post(url, data=body, headers=headers) as response:
                            await response.read()
                            if response.status != 200:
                                errors += 1
                    except aiohttp.ClientError:
                        errors += 1
                    done = time.perf_counter()
                    if now >= measure_from:
                        latencies.append(done - now)

            await asyncio.gather(*(caller() for _ in range(concurrency)))
            return summary(latencies, seconds, errors)

    return asyncio.run(main())


def load_in_subprocess(
    port: int,
    concurrency: int,
    seconds: float,
    warmup_s: float,
    request_file: Path,
    kind: str = "grpc",
    channels: int = 1,
) -> dict:
    """``load`` (or ``rest_load``) in a fresh process (so the load generator never shares a GIL with a server)."""
    flag = "--rest-load" if kind == "rest" else "--load"
    argv = [flag, str(port), str(concurrency), str(seconds), str(warmup_s), str(request_file)]
    if kind != "rest":
        argv += ["--channels", str(channels)]
    out = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def sdk_load(port: int, seconds: float, warmup_s: float, request: bytes) -> dict[str, dict[str, float]]:
    """``PredictorClient.predict`` on a DataFrame against the prebuilt raw request, one call at a time.

    The two alternate call by call (which goes first flips every round), so drift on a
    busy machine falls on both alike. Returns mean/p50/p99 (ms) and calls/s of each path.
    """
    import grpc
    import numpy as np
    import pandas as pd

    from trainwire.predictor_client import PredictorClient, decode_response
    from trainwire_core.inference import grpc_service_pb2 as pb

    parsed = pb.ModelInferRequest.FromString(request)
    rows = np.frombuffer(parsed.raw_input_contents[0], dtype="<f8").reshape(tuple(parsed.inputs[0].shape))
    frame = pd.DataFrame(rows.copy(), columns=FEATURES)
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    raw_call = channel.unary_unary(METHOD)
    client = PredictorClient(address, timeout_s=10)
    paths = {"raw": lambda: raw_call(request, timeout=10), "sdk": lambda: client.predict(parsed.model_name, frame)}
    expected = decode_response(pb.ModelInferResponse.FromString(paths["raw"]()))
    np.testing.assert_array_equal(paths["sdk"]()["predictions"].to_numpy(), expected["predictions"].to_numpy())

    times: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths.items())
    start = time.perf_counter()
    measure_from, stop_at = start + warmup_s, start + warmup_s + 2 * seconds
    i = 0
    while (now := time.perf_counter()) < stop_at:
        for name, call in order if i % 2 == 0 else order[::-1]:
            began = time.perf_counter()
            call()
            if now >= measure_from:
                times[name].append(time.perf_counter() - began)
        i += 1
    client.close()
    channel.close()
    out = {}
    for name, values in times.items():
        arr = np.asarray(values) * 1000
        out[name] = {
            "mean_ms": float(arr.mean()),
            "p50_ms": float(np.percentile(arr, 50)),
            "p99_ms": float(np.percentile(arr, 99)),
            "calls_per_s": 1000 / float(arr.mean()),
            "calls": len(arr),
        }
    return out


def sdk_load_in_subprocess(port: int, seconds: float, warmup_s: float, request_file: Path) -> dict:
    """``sdk_load`` in a fresh process."""
    argv = ["--sdk-load", str(port), str(seconds), str(warmup_s), str(request_file)]
    out = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- the report ------------------------------------------------------------------
def median_cell(trials: list[dict[str, float]]) -> dict[str, float]:
    """The median of each figure over a cell's trials (errors: their sum)."""
    cell = {key: statistics.median(t[key] for t in trials) for key in ("rps", "p50_ms", "p99_ms")}
    cell["errors"] = sum(t["errors"] for t in trials)
    return cell


def targets(cells: dict[tuple[str, int], dict[str, float]], sdk: dict | None) -> list[dict[str, Any]]:
    """Each target of issues 8 and 20: what it compares, the measured ratio, the bound and whether it holds."""
    rows: list[dict[str, Any]] = []

    def add(label: str, value: float, bound: float, at_least: bool) -> None:
        met = value >= bound if at_least else value <= bound
        rows.append({"target": label, "value": value, "bound": f"{'>=' if at_least else '<='} {bound:.2f}", "met": met})

    tw = {c: cells[("trainwire", c)] for c in CONCURRENCY}
    bare = {c: cells[("bare", c)] for c in CONCURRENCY}
    add("c=32 throughput, trainwire / bare", tw[32]["rps"] / bare[32]["rps"], 0.8, True)
    add("c=1  throughput, trainwire / bare", tw[1]["rps"] / bare[1]["rps"], 0.7, True)
    if ("mlserver", 32) in cells:
        ml = {c: cells[("mlserver", c)] for c in CONCURRENCY}
        add("c=32 throughput, trainwire / MLServer", tw[32]["rps"] / ml[32]["rps"], 4.0, True)
        for c in CONCURRENCY:
            add(f"c={c:<2} p99, trainwire / MLServer", tw[c]["p99_ms"] / ml[c]["p99_ms"], 0.5, False)
    if ("mlserver-rest", 32) in cells:
        rest = {c: cells[("trainwire-rest", c)] for c in CONCURRENCY}
        ml_rest = {c: cells[("mlserver-rest", c)] for c in CONCURRENCY}
        for c in (8, 32):
            add(f"c={c:<2} REST throughput, trainwire / MLServer", rest[c]["rps"] / ml_rest[c]["rps"], 3.0, True)
            add(f"c={c:<2} REST p99, trainwire / MLServer", rest[c]["p99_ms"] / ml_rest[c]["p99_ms"], 0.5, False)
    for c in CONCURRENCY:
        scaled = cells[("trainwire+scaler", c)]
        # Cost per request: the inverse of throughput, so the same 1.2x bound reads both ways.
        add(f"c={c:<2} cost, scaler / plain (req/s inverse)", tw[c]["rps"] / scaled["rps"], 1.2, False)
        add(f"c={c:<2} p50, scaler / plain", scaled["p50_ms"] / tw[c]["p50_ms"], 1.2, False)
    if sdk is not None:
        add("c=1  p50, PredictorClient / raw request", sdk["sdk"]["p50_ms"] / sdk["raw"]["p50_ms"], 1.3, False)
    return rows


def report(args: argparse.Namespace, cells: dict[tuple[str, int], dict[str, float]], sdk: dict | None) -> list[dict]:
    """Prints the figures and the targets; returns the targets' rows."""
    print(
        f"\nXGBoost (breast cancer, {TREES} trees), {ROWS}-row raw FP64 requests, loopback, "
        f"{args.seconds:g} s/cell, median of {args.trials} interleaved trials"
    )
    print(f"{'server':<17} {'conc':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for conc in CONCURRENCY:
        for (name, c), r in cells.items():
            if c == conc:
                print(f"{name:<17} {c:>4} {r['rps']:>9.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['errors']:>6}")
    if sdk is not None:
        print(f"\nSDK, concurrency 1, {ROWS}-row DataFrame ({FEATURES[0]}..{FEATURES[-1]}) vs the prebuilt raw request")
        print(f"{'path':<36} {'calls/s':>8} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8}")
        labels = {"raw": "raw request (prebuilt bytes)", "sdk": "PredictorClient.predict(DataFrame)"}
        for name, r in sdk.items():
            figures = f"{r['calls_per_s']:>8.0f} {r['mean_ms']:>8.3f} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f}"
            print(f"{labels[name]:<36} {figures}")
    if ("before", 1) in cells:
        print(f"\nthe working tree against the predictor at {args.compare_to} (req/s ratio; each to the bare server)")
        for c in CONCURRENCY:
            now, then, bare = cells[("trainwire", c)], cells[("before", c)], cells[("bare", c)]
            rest_now, rest_then = cells[("trainwire-rest", c)], cells[("before-rest", c)]
            print(
                f"c={c:<2} gRPC {now['rps'] / then['rps']:.2f}x ({now['rps'] / bare['rps']:.2f} against "
                f"{then['rps'] / bare['rps']:.2f} of bare)   REST {rest_now['rps'] / rest_then['rps']:.2f}x"
            )
    rows = targets(cells, sdk)
    print("\ntargets (issues 8 and 20)")
    print(f"{'':<44} {'ratio':>6} {'target':>8}")
    for row in rows:
        print(f"{row['target']:<44} {row['value']:>6.2f} {row['bound']:>8}  {'met' if row['met'] else 'MISSED'}")
    print(f"{sum(r['met'] for r in rows)} of {len(rows)} targets met")
    return rows


def main() -> None:
    """Starts the servers, runs the interleaved trials and prints the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per cell and trial")
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--trials", type=int, default=3, help="rounds over every cell (median reported)")
    parser.add_argument("--server-warmup-s", type=float, default=5.0, help="unrecorded load on each server first")
    parser.add_argument("--skip-mlserver", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--compare-to", metavar="REV", help="also serve the predictor package as of this git revision")
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--rest-load", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--sdk-load", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--channels", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server)
        return
    if args.load:
        port, conc, secs, warm, request_file = args.load
        result = load(int(port), int(conc), float(secs), float(warm), Path(request_file).read_bytes(), args.channels)
        print(json.dumps(result))
        return
    if args.rest_load:
        port, conc, secs, warm, body_file = args.rest_load
        print(json.dumps(rest_load(int(port), int(conc), float(secs), float(warm), Path(body_file).read_bytes())))
        return
    if args.sdk_load:
        port, secs, warm, request_file = args.sdk_load
        print(json.dumps(sdk_load(int(port), float(secs), float(warm), Path(request_file).read_bytes())))
        return

    workdir = Path(tempfile.mkdtemp(prefix="trainwire-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        model_dir, request = train_model(workdir)
        requests = {MODEL: workdir / "request.bin", SCALED_MODEL: workdir / "request-scaled.bin"}
        requests[MODEL].write_bytes(request)
        requests[SCALED_MODEL].write_bytes(train_scaled_model(workdir))
        body_file = workdir / "body.json"
        body_file.write_bytes(rest_body(request))
        # name -> (port, request file, protocol)
        servers: dict[str, tuple[int, Path, str]] = {}

        port, http_port = free_port(), free_port()
        procs.append(start_predictor(workdir, port, "trainwire", http_port=http_port))
        servers["trainwire"] = (port, requests[MODEL], "grpc")
        servers["trainwire+scaler"] = (port, requests[SCALED_MODEL], "grpc")
        servers["trainwire-rest"] = (http_port, body_file, "rest")
        if args.compare_to:
            # The predictor as it was at REV, first on the path of a process of its own.
            package = checkout_predictor(workdir, args.compare_to)
            path = os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH", "")]))
            port, http_port = free_port(), free_port()
            procs.append(start_predictor(workdir, port, "before", {"PYTHONPATH": path}, http_port=http_port))
            servers["before"] = (port, requests[MODEL], "grpc")
            servers["before-rest"] = (http_port, body_file, "rest")
        # The same predictor with every model call on its threads (none on the event loop).
        port = free_port()
        procs.append(start_predictor(workdir, port, "trainwire-threads", {"TRAINWIRE_PREDICTOR_INLINE_BUDGET_US": "0"}))
        servers["trainwire-threads"] = (port, requests[MODEL], "grpc")
        if not args.skip_mlserver:
            port, http_port = free_port(), free_port()
            mlserver = ensure_mlserver()
            log = open(workdir / "mlserver.log", "w")  # noqa: SIM115 - lives as long as the server
            settings_dir = mlserver_dir(workdir, model_dir, port, http_port)
            # One OpenMP thread, as trainwire's compiled model scores on one: with XGBoost's default (every
            # core) its threads spin against the load generator on a small shared machine, and MLServer
            # falls to a tenth of its speed (34-71 req/s over REST at concurrency 8 against 600-720).
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            procs.append(subprocess.Popen([str(mlserver), "start", str(settings_dir)], stdout=log, stderr=log, env=env))
            servers["mlserver"] = (port, requests[MODEL], "grpc")
            servers["mlserver-rest"] = (http_port, body_file, "rest")
        port = free_port()
        procs.append(
            subprocess.Popen([sys.executable, __file__, "--bare-server", str(port)], stdout=subprocess.DEVNULL)
        )
        servers["bare"] = (port, requests[MODEL], "grpc")
        for port, request_file, kind in servers.values():
            # The first call also loads (and compiles) the model.
            (wait_rest_ready if kind == "rest" else wait_ready)(port, request_file.read_bytes())

        # Unrecorded load first: a freshly started MLServer runs at a third of its speed for its first seconds.
        for port, request_file, kind in servers.values():
            load_in_subprocess(port, 8, args.server_warmup_s, 0.0, request_file, kind)
        trials: dict[tuple[str, int], list[dict]] = {(name, c): [] for c in CONCURRENCY for name in servers}
        names = list(servers)
        for trial in range(args.trials):
            for conc in CONCURRENCY:
                for name in names[trial % len(names) :] + names[: trial % len(names)]:
                    port, request_file, kind = servers[name]
                    result = load_in_subprocess(port, conc, args.seconds, args.warmup_s, request_file, kind)
                    trials[(name, conc)].append(result)
                    print(
                        f"trial {trial + 1} {name:<17} c={conc:<2} {result['rps']:>7.0f} req/s  "
                        f"p50 {result['p50_ms']:6.2f} ms  p99 {result['p99_ms']:6.2f} ms",
                        flush=True,
                    )
        sdk = sdk_load_in_subprocess(
            servers["trainwire"][0], args.seconds * args.trials, args.warmup_s, requests[MODEL]
        )
        cells = {key: median_cell(values) for key, values in trials.items()}
        rows = report(args, cells, sdk)
        if args.json:
            figures = {
                "seconds_per_cell": args.seconds,
                "trials": args.trials,
                "cells": [{"server": n, "concurrency": c, **cells[(n, c)], "trials": trials[(n, c)]} for n, c in cells],
                "sdk": sdk,
                "targets": rows,
            }
            args.json.write_text(json.dumps(figures, indent=2))
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
