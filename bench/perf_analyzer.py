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

Run: .venv/bin/python bench/perf_analyzer.py [--concurrency 1 8 32] [--requests 2000]
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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
    workdir: Path, url: str, protocol: str, shm: str, concurrency: int, requests: int, timeout_s: float
) -> dict[str, float | str]:
    """One perf_analyzer measurement; its CSV's throughput and p99 (or why there is none)."""
    out = workdir / f"pa-{protocol}-{shm}-{concurrency}.csv"
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
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        str(requests),
        "--stability-percentage",
        "25",
        "--max-trials",
        "6",
        "--shared-memory",
        shm,
        "-f",
        str(out),
    ]
    if shm == "system":
        cmd += ["--output-shared-memory-size", "1024"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no result in {timeout_s:g} s"}
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return {"error": tail[0][:80]}
    with out.open() as f:
        row = next(csv.DictReader(f))
    return {"ips": float(row["Inferences/Second"]), "p99_ms": float(row["p99 latency"]) / 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(pt.CONCURRENCY))
    parser.add_argument("--requests", type=int, default=2000, help="requests per perf_analyzer window")
    parser.add_argument("--seconds", type=float, default=3.0, help="the bare server's measured window")
    parser.add_argument("--cell-timeout", type=float, default=120.0)
    args = parser.parse_args()

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
