"""Triton's perf_analyzer against the predictor: gRPC and HTTP, with and without system shared memory.

A predictor process serves an XGBoost booster (``predictor_throughput.py``'s, committed here as
one 2-D input, ``input`` [-1, 30]: perf_analyzer cannot feed the per-column inputs of a model
that records its feature columns, whose rows are scalars) and perf_analyzer
(``scripts/perf_analyzer.sh``: the 2.60.0 binary, set up under ~/.cache) loads it with 32-row
requests at concurrency 1, 8 and 32, over gRPC and HTTP, with ``--shared-memory none`` and
``system``. Beside them, the bare grpc.aio server of ``grpc_overhead.py`` (fixed bytes, no
model) under the bench's own closed-loop gRPC generator: perf_analyzer cannot load it (it
answers no metadata or config), so that column is the floor of the transport, not a like for
like figure.

Each cell is throughput (inferences/s = requests/s x 32 rows) and the client's p99 in ms; a
cell perf_analyzer did not finish within ``--cell-timeout`` says so.

``--side-by-side`` (issue 39's comparison) instead runs, over gRPC, the same 32-row requests
against: trainwire with 1 and with 2 workers (``--workers 2``), MLServer 1.7.1 (its own
virtualenv, as ``predictor_throughput.py`` makes it, ``OMP_NUM_THREADS=1``), the bare grpc.aio
server and PyTriton (when ``--pytriton-python`` names a virtualenv's python with
``nvidia-pytriton`` and ``xgboost``). perf_analyzer loads every server it can (it needs
Triton's ModelConfig RPC: trainwire and PyTriton answer it); the bench's own closed-loop
grpc.aio client loads every server, so each column has a like-for-like figure beside the bare
server's. Both clients spread their calls over several TCP connections (perf_analyzer: one
channel per thread, ``TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1``; the bench's client: one
channel per caller, up to 16): a ``--workers 2`` server's kernel hands each connection to one
worker. Servers take turns in a rotating order over ``--trials`` trials, each cell the median;
beside each own-client cell, the server's CPU per request (all its processes, from ``/proc``).

With ``--compare-to REV`` (a git revision), the predictor package as it was at REV serves too, with 1
and 2 workers ("before, 1 worker", "before, 2 workers"), so a change is measured under the same load.

Run: .venv/bin/python bench/perf_analyzer.py [--concurrency 1 8 32] [--requests 2000]
     .venv/bin/python bench/perf_analyzer.py --side-by-side [--trials 3] [--pytriton-python PY] [--json out.json]
         [--compare-to REV] [--skip-mlserver]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import predictor_throughput as pt  # noqa: E402 - the sibling bench's model, servers and load generator

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "perf_analyzer.sh"
MODEL = "cancer-matrix"


def commit_matrix_model(workdir: Path) -> None:
    """The booster as run ``cancer-matrix``: no recorded feature columns, so its one input is [-1, 30]."""
    import xgboost

    from trainwire.config import CheckpointConfig
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store

    x, y = pt._cancer()
    booster = xgboost.train(pt.PARAMS, xgboost.DMatrix(x, label=y), pt.TREES)
    model_dir = workdir / "model-matrix"
    model_dir.mkdir()
    booster.save_model(str(model_dir / "model.ubj"))
    store = Store(str(workdir / "store"))
    manager = CheckpointManager(store, "bench-matrix", MODEL, CheckpointConfig())
    manager.commit("c1", 1, {}, store.upload_dir(model_dir, store.checkpoint_dir("bench-matrix", "c1")))


def run_cell(
    workdir: Path,
    url: str,
    protocol: str,
    shm: str,
    concurrency: int,
    requests: int,
    timeout_s: float,
    tag: str = "",
    window_ms: int | None = None,
) -> dict[str, float | str]:
    """One perf_analyzer measurement; its CSV's throughput and p99 (or why there is none).

    With ``window_ms``: three time windows of that length, averaged (the stability criterion
    relaxed so a shared machine's swings still give a figure; the bench's trials take the median),
    and one gRPC channel per perf_analyzer thread.
    """
    out = workdir / f"pa-{tag}{protocol}-{shm}-{concurrency}.csv"
    if window_ms is None:
        window = ["--measurement-mode", "count_windows", "--measurement-request-count", str(requests)]
        window += ["--stability-percentage", "25", "--max-trials", "6"]
    else:
        window = ["--measurement-mode", "time_windows", "--measurement-interval", str(window_ms)]
        window += ["--stability-percentage", "1000", "--max-trials", "3"]
    cmd = [
        "bash",
        str(SCRIPT),
        "-m",
        MODEL,
        "-u",
        url,
        "-i",
        protocol,
        "-b",
        str(pt.ROWS),
        "--shape",
        "input:30",
        "--concurrency-range",
        str(concurrency),
        *window,
        "--shared-memory",
        shm,
        "-f",
        str(out),
    ]
    if shm == "system":
        cmd += ["--output-shared-memory-size", "1024"]
    # One channel per perf_analyzer thread (the client library shares one among 6 by default).
    env = {**os.environ, "TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT": "1"} if window_ms else None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"no result in {timeout_s:g} s"}
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return {"error": tail[0][:80]}
    with out.open() as f:
        row = next(csv.DictReader(f))
    return {"ips": float(row["Inferences/Second"]), "p99_ms": float(row["p99 latency"]) / 1000}


# --- side by side (issue 39) -------------------------------------------------------
OWN_CHANNELS_MAX = 16


def pytriton_server(grpc_port: int, http_port: int, model_file: str) -> None:
    """PyTriton (Triton's own server under a Python model) serving the booster as ``MODEL``.

    Runs in PyTriton's virtualenv: ``PY bench/perf_analyzer.py --pytriton-server ...``.
    """
    import numpy as np
    import xgboost
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    booster = xgboost.Booster()
    booster.load_model(model_file)
    booster.set_param({"nthread": 1})  # one thread, as trainwire's compiled model and MLServer here

    @batch
    def infer(input: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002 - the tensor's name
        return {"predictions": booster.inplace_predict(input).astype(np.float32).reshape(-1, 1)}

    config = TritonConfig(grpc_port=grpc_port, http_port=http_port, metrics_port=pt.free_port())
    # No endpoint behind PyTriton's access token: perf_analyzer reads ModelStatistics, restricted by default.
    with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
        triton.bind(
            model_name=MODEL,
            infer_func=infer,
            inputs=[Tensor(name="input", dtype=np.float64, shape=(30,))],
            outputs=[Tensor(name="predictions", dtype=np.float32, shape=(1,))],
            config=ModelConfig(max_batch_size=pt.ROWS),
        )
        print("ready", flush=True)
        triton.serve()


def pytriton_env(args: argparse.Namespace) -> dict[str, str]:
    """PyTriton's environment: its Python backend stub finds the libpython of the interpreter it serves.

    The stub links ``libpython3.X.so``; where the system's (Debian's 3.11.2) is found first, it runs
    that C runtime under the virtualenv's own standard library (pyenv's 3.11.7) and fails in
    multiprocessing. The interpreter's own ``LIBDIR`` first puts the two back together.
    """
    libdir = subprocess.run(
        [args.pytriton_python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR') or '')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH", "")]))
    return {**os.environ, "LD_LIBRARY_PATH": path}


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and every process below it, from ``/proc``."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, p in parents.items() if p == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(ticks.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


def own_cell(proc: subprocess.Popen, port: int, concurrency: int, seconds: float, request_file: Path) -> dict:
    """The bench's own client against one server, with the server's CPU per request over the cell."""
    channels = min(concurrency, OWN_CHANNELS_MAX)
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before, wall_before = tree_cpu_s(proc.pid), time.perf_counter()
    result = pt.load_in_subprocess(port, concurrency, seconds, 0.5, request_file, channels=channels)
    cpu, wall = tree_cpu_s(proc.pid) - cpu_before, time.perf_counter() - wall_before
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = (client_after.ru_utime + client_after.ru_stime) - (client_before.ru_utime + client_before.ru_stime)
    # Over the whole cell (its warm-up and the client's start too): CPU per request, and cores busy.
    requests = result["rps"] * (seconds + 0.5)
    result["cpu_us_per_request"] = cpu / requests * 1e6 if requests else float("nan")
    result["server_cores"] = cpu / wall
    result["client_cores"] = client / wall  # the load generator's process (its interpreter's start included)
    return result


def start_side_by_side(workdir: Path, args: argparse.Namespace, request: bytes) -> dict[str, dict[str, Any]]:
    """Starts every server of the comparison; returns name -> its process, port and which clients load it."""
    model_dir = workdir / "model-matrix"
    servers: dict[str, dict[str, Any]] = {}
    before: dict[str, str] | None = None
    if args.compare_to:
        package = pt.checkout_predictor(workdir, args.compare_to)
        before = {"PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH", "")]))}
    for name, workers in (("trainwire 1 worker", 1), ("trainwire 2 workers", 2)):
        extra = ["--workers", str(workers)] if workers > 1 else []
        for label, env in ((name, None), (f"before, {name.split(' ', 1)[1]}", before)):
            if label != name and env is None:
                continue
            port = pt.free_port()
            proc = pt.start_predictor(workdir, port, label.replace(" ", "-").replace(",", ""), env, extra=extra)
            servers[label] = {"proc": proc, "port": port, "perf_analyzer": True}
    if not args.skip_mlserver:
        port, http_port = pt.free_port(), pt.free_port()
        mlserver = pt.ensure_mlserver()
        inputs = [{"name": "input", "datatype": "FP64", "shape": [-1, 30]}]
        settings = pt.mlserver_dir(workdir, model_dir, port, http_port, name=MODEL, inputs=inputs)
        log = open(workdir / "mlserver.log", "w")  # noqa: SIM115 - lives as long as the server
        env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as predictor_throughput.py (its note says why)
        proc = subprocess.Popen([str(mlserver), "start", str(settings)], stdout=log, stderr=log, env=env)
        servers["MLServer"] = {"proc": proc, "port": port, "perf_analyzer": True}
    if args.pytriton_python:
        port, http_port = pt.free_port(), pt.free_port()
        log = open(workdir / "pytriton.log", "w")  # noqa: SIM115 - lives as long as the server
        argv = [args.pytriton_python, __file__, "--pytriton-server", str(port), str(http_port)]
        proc = subprocess.Popen([*argv, str(model_dir / "model.ubj")], stdout=log, stderr=log, env=pytriton_env(args))
        servers["PyTriton"] = {"proc": proc, "port": port, "perf_analyzer": True}
    port = pt.free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "grpc_overhead.py"), "--bare-server", str(port)],
        stdout=subprocess.DEVNULL,
    )
    servers["bare grpc.aio"] = {"proc": proc, "port": port, "perf_analyzer": False}
    for server in servers.values():
        pt.wait_ready(server["port"], request)
    return servers


def side_by_side(args: argparse.Namespace) -> None:
    """Issue 39's comparison: every server under perf_analyzer (where it can) and the bench's own client."""
    subprocess.run(["bash", str(SCRIPT), "--setup-only"], check=True, stdout=subprocess.DEVNULL)
    # SIGTERM (a timeout) unwinds through the finally below, so no server outlives the bench.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="trainwire-side-by-side-"))
    servers: dict[str, dict[str, Any]] = {}
    try:
        pt.train_model(workdir)  # the store
        commit_matrix_model(workdir)
        request = pt.request_bytes(MODEL, pt._cancer()[0][: pt.ROWS])  # one request for every server
        request_file = workdir / "request.bin"
        request_file.write_bytes(request)
        servers = start_side_by_side(workdir, args, request)
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        print(f"servers up; {load}", flush=True)
        # Unrecorded load first, on every connection (a --workers 2 server's second worker loads on its first call).
        for server in servers.values():
            pt.load_in_subprocess(server["port"], 16, args.server_warmup_s, 0.0, request_file, channels=16)

        trials: dict[tuple[str, str, int], list[dict]] = {}
        names = list(servers)
        window_ms = int(args.seconds * 1000)
        for trial in range(args.trials):
            for c in args.concurrency:
                for name in names[trial % len(names) :] + names[: trial % len(names)]:
                    server = servers[name]
                    cells: dict[str, dict] = {}
                    if server["perf_analyzer"]:
                        url = f"127.0.0.1:{server['port']}"
                        tag = f"{name.replace(' ', '_')}-{trial}-"
                        cells["perf_analyzer"] = run_cell(
                            workdir, url, "grpc", "none", c, 0, args.cell_timeout, tag, window_ms
                        )
                    cells["own"] = own_cell(server["proc"], server["port"], c, args.seconds, request_file)
                    for client, cell in cells.items():
                        trials.setdefault((name, client, c), []).append(cell)
                        print(f"trial {trial + 1} c={c:<2} {name:<20} {client:<14} {fmt(cell)}", flush=True)
        load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        result = side_by_side_report(args, names, trials, load, load_after)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
    finally:
        for server in servers.values():
            server["proc"].terminate()
        for server in servers.values():
            try:
                server["proc"].wait(15)
            except subprocess.TimeoutExpired:
                server["proc"].kill()
        shutil.rmtree(workdir, ignore_errors=True)


def fmt(cell: dict) -> str:
    """A cell as requests/s and p99 (and the server's CPU per request where measured)."""
    if "error" in cell:
        return str(cell["error"])
    rps = cell["rps"] if "rps" in cell else cell["ips"] / pt.ROWS
    text = f"{rps:>7,.0f} req/s  p99 {cell['p99_ms']:6.2f} ms"
    if "cpu_us_per_request" in cell:
        text += f"  server {cell['cpu_us_per_request']:5.0f} us/req on {cell['server_cores']:.2f} cores"
        text += f", client {cell['client_cores']:.2f} cores"
    return text


def median_cell(cells: list[dict]) -> dict:
    """Each figure's median over the trials that gave one (an error only when none did)."""
    good = [c for c in cells if "error" not in c]
    if not good:
        return {"error": cells[-1]["error"]}
    out = {key: statistics.median(c[key] for c in good) for key in good[0] if isinstance(good[0][key], int | float)}
    if "ips" in out:
        out["rps"] = out["ips"] / pt.ROWS
    out["trials"] = len(good)
    return out


def side_by_side_report(
    args: argparse.Namespace, names: list[str], trials: dict[tuple[str, str, int], list[dict]], load: str, after: str
) -> dict[str, Any]:
    """Prints the table and the goals; returns the figures for ``--json``."""
    cells = {key: median_cell(values) for key, values in trials.items()}
    print(
        f"\n{pt.ROWS}-row XGBoost requests over gRPC: requests/s and p99 (ms), median of {args.trials} "
        f"interleaved trials of {args.seconds:g} s windows\nload before: {load}\nload after:  {after}"
    )
    own_title = "the bench's grpc.aio client (requests/s / p99 / the server's CPU per request)"
    for client, title in (("perf_analyzer", "perf_analyzer 2.60.0"), ("own", own_title)):
        columns = [n for n in names if (n, client, args.concurrency[0]) in cells]
        print(f"\n{title}\n| concurrency | " + " | ".join(columns) + " |")
        print("|---:|" + "---:|" * len(columns))
        for c in args.concurrency:
            row = []
            for n in columns:
                cell = cells[(n, client, c)]
                text = "" if "error" in cell else f"{cell['rps']:,.0f} / {cell['p99_ms']:.2f} ms"
                if "cpu_us_per_request" in cell:  # the server's CPU per request (own client)
                    text += f" / {cell['cpu_us_per_request']:.0f} us"
                row.append(cell.get("error", text))
            print(f"| {c} | " + " | ".join(row) + " |")
    goals = []

    def goal(label: str, value: float, bound: float, at_least: bool) -> None:
        met = value >= bound if at_least else value <= bound
        goals.append({"goal": label, "value": value, "bound": bound, "met": met})
        print(f"{label:<58} {value:6.2f}  ({'>=' if at_least else '<='} {bound:g}: {'met' if met else 'MISSED'})")

    print("\ngoals (issue 39)")
    top = max(args.concurrency)
    two, bare = cells.get(("trainwire 2 workers", "own", top)), cells.get(("bare grpc.aio", "own", top))
    if two and bare and "error" not in two and "error" not in bare:
        goal(f"c={top} req/s, 2 workers / bare (own client)", two["rps"] / bare["rps"], 1.0, True)
    for workers in ("trainwire 1 worker", "trainwire 2 workers"):
        for client in ("perf_analyzer", "own"):
            for c in args.concurrency:
                ours, theirs = cells.get((workers, client, c)), cells.get(("MLServer", client, c))
                if ours and theirs and "error" not in ours and "error" not in theirs:
                    label = f"c={c:<2} p99, {workers} / MLServer ({client})"
                    goal(label, ours["p99_ms"] / theirs["p99_ms"], 0.5, False)
    return {
        "load_before": load,
        "load_after": after,
        "seconds": args.seconds,
        "trials": args.trials,
        "cells": [
            {"server": n, "client": client, "concurrency": c, **cells[(n, client, c)], "each": trials[(n, client, c)]}
            for n, client, c in cells
        ],
        "goals": goals,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(pt.CONCURRENCY))
    parser.add_argument("--requests", type=int, default=2000, help="requests per perf_analyzer window")
    parser.add_argument("--seconds", type=float, default=3.0, help="the bare server's measured window")
    parser.add_argument("--cell-timeout", type=float, default=120.0)
    parser.add_argument("--side-by-side", action="store_true", help="issue 39's comparison (see above)")
    parser.add_argument("--trials", type=int, default=3, help="side by side: rounds over every cell")
    parser.add_argument("--server-warmup-s", type=float, default=5.0, help="side by side: unrecorded load first")
    parser.add_argument("--skip-mlserver", action="store_true")
    parser.add_argument("--pytriton-python", help="side by side: a python with nvidia-pytriton and xgboost")
    parser.add_argument("--json", type=Path, help="side by side: also write the figures here")
    parser.add_argument(
        "--compare-to", metavar="REV", help="side by side: also serve the predictor package as of this git revision"
    )
    parser.add_argument("--pytriton-server", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pytriton_server:
        grpc_port, http_port, model_file = args.pytriton_server
        pytriton_server(int(grpc_port), int(http_port), model_file)
        return
    if args.side_by_side:
        side_by_side(args)
        return

    subprocess.run(["bash", str(SCRIPT), "--setup-only"], check=True, stdout=subprocess.DEVNULL)
    workdir = Path(tempfile.mkdtemp(prefix="trainwire-perf-analyzer-"))
    procs: list[subprocess.Popen] = []
    try:
        _, request = pt.train_model(workdir)  # its store, and the bare server's request shape
        commit_matrix_model(workdir)
        grpc_port, http_port, bare_port = pt.free_port(), pt.free_port(), pt.free_port()
        procs.append(pt.start_predictor(workdir, grpc_port, "predictor", http_port=http_port))
        pt.wait_ready(grpc_port, pt.request_bytes(MODEL, pt._cancer()[0][: pt.ROWS]))
        bare = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "grpc_overhead.py"), "--bare-server", str(bare_port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(bare)
        assert bare.stdout is not None
        bare.stdout.readline()
        request_file = workdir / "request.bin"
        request_file.write_bytes(request)

        cells: dict[tuple[str, str, int], dict[str, float | str]] = {}
        urls = {"grpc": f"127.0.0.1:{grpc_port}", "http": f"127.0.0.1:{http_port}"}
        for c in args.concurrency:
            for protocol in ("grpc", "http"):
                for shm in ("none", "system"):
                    cells[(protocol, shm, c)] = run_cell(
                        workdir, urls[protocol], protocol, shm, c, args.requests, args.cell_timeout
                    )
                    print(protocol, shm, c, cells[(protocol, shm, c)], flush=True)
            result = pt.load_in_subprocess(bare_port, c, args.seconds, 0.5, request_file)
            cells[("bare", "none", c)] = {"ips": result["rps"] * pt.ROWS, "p99_ms": result["p99_ms"]}

        columns = [("grpc", "none"), ("grpc", "system"), ("http", "none"), ("http", "system"), ("bare", "none")]
        heads = ["gRPC", "gRPC + shm", "HTTP", "HTTP + shm", "bare grpc.aio*"]
        print(f"\n{pt.ROWS}-row XGBoost requests: inferences/s, p99 ms (perf_analyzer 2.60.0)")
        print("| concurrency | " + " | ".join(heads) + " |")
        print("|---:|" + "---:|" * len(heads))
        for c in args.concurrency:
            row = []
            for key in columns:
                cell = cells[(*key, c)]
                row.append(f"{cell['error']}" if "error" in cell else f"{cell['ips']:,.0f} / {cell['p99_ms']:.2f} ms")
            print(f"| {c} | " + " | ".join(row) + " |")
        print("\n* fixed bytes, no model, loaded by the bench's own gRPC generator (perf_analyzer needs metadata).")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
