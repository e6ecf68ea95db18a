"""Soak: closed-loop load on one predictor for minutes; its memory must stay flat and no request may fail.

Serves the XGBoost booster of ``predictor_throughput.py`` (a committed checkpoint in a
fresh store) from one ``python -m trainwire_predictor`` process, drives it with
``--concurrency`` callers from a separate load process (32-row raw FP64 requests,
as ghz would), and samples the predictor's resident memory every few seconds.
The baseline is the first sample after the warm-up (model loaded, caches and
gRPC buffers grown). Targets: RSS growth at most 5%, zero failed requests.

Run: .venv/bin/python bench/soak.py [--minutes 10] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from predictor_throughput import free_port, load_in_subprocess, train_model, wait_ready

RSS_GROWTH_TARGET = 0.05


def rss_bytes(pid: int) -> int:
    """The process's resident set size, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="measured minutes of load")
    parser.add_argument("--warmup-s", type=float, default=30.0, help="load before the baseline sample")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="trainwire-soak-"))
    server: subprocess.Popen | None = None
    try:
        _, request = train_model(workdir)
        request_file = workdir / "request.bin"
        request_file.write_bytes(request)
        port = free_port()
        log = open(workdir / "predictor.log", "w")  # noqa: SIM115 - lives as long as the server
        server = subprocess.Popen(
            [sys.executable, "-m", "trainwire_predictor", "--port", str(port), "--store", str(workdir / "store")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped by id below
        )
        wait_ready(port, request)

        seconds = args.minutes * 60
        result: dict = {}
        failure: list[BaseException] = []

        def drive() -> None:
            try:
                result.update(load_in_subprocess(port, args.concurrency, seconds, args.warmup_s, request_file))
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failure.append(exc)

        load = threading.Thread(target=drive)
        started = time.monotonic()
        load.start()
        time.sleep(args.warmup_s)
        samples: list[tuple[float, int]] = []
        while load.is_alive():
            samples.append((time.monotonic() - started, rss_bytes(server.pid)))
            load.join(args.sample_s)
        if server.poll() is not None:
            tail = (workdir / "predictor.log").read_text()[-2000:]
            raise RuntimeError(f"the predictor exited with {server.returncode} during the soak:\n{tail}")
        if failure:
            raise RuntimeError("the load generator failed") from failure[0]

        base, peak, end = samples[0][1], max(s[1] for s in samples), samples[-1][1]
        figures = {
            "minutes": args.minutes,
            "concurrency": args.concurrency,
            "requests": round(result["rps"] * seconds),
            "req_per_s": result["rps"],
            "p50_ms": result["p50_ms"],
            "p99_ms": result["p99_ms"],
            "failed": result["errors"],
            "rss_start_mib": base / 2**20,
            "rss_max_mib": peak / 2**20,
            "rss_end_mib": end / 2**20,
            "rss_growth": end / base - 1,
            "rss_max_growth": peak / base - 1,
        }
        print(f"\nsoak: {args.minutes:g} min, {args.concurrency} callers, 32-row XGBoost requests, one predictor")
        print(f"  requests {figures['requests']} ({figures['req_per_s']:.0f}/s), failed {figures['failed']}")
        print(f"  latency p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms")
        print(
            f"  RSS after warm-up {figures['rss_start_mib']:.1f} MiB, max {figures['rss_max_mib']:.1f} MiB, "
            f"end {figures['rss_end_mib']:.1f} MiB: growth {100 * figures['rss_growth']:+.2f}% "
            f"(max {100 * figures['rss_max_growth']:+.2f}%)"
        )
        met = figures["rss_max_growth"] <= RSS_GROWTH_TARGET and figures["failed"] == 0
        print(f"  target (RSS growth <= {100 * RSS_GROWTH_TARGET:.0f}%, 0 failures): {'met' if met else 'MISSED'}")
        print(
            "  RSS over time (s: MiB): "
            + ", ".join(f"{t:.0f}: {r / 2**20:.1f}" for t, r in samples[:: max(1, len(samples) // 12)])
        )
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
