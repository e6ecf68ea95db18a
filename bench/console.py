"""What the console costs: page loads at scale, report-to-page latency, CPU while pages follow runs.

Seeds a coordinator's SQLite state with 1,000 finished runs and one run of 100,000 reports, starts
a coordinator (local Ray) and ``trainwire console`` on loopback, then measures:

1. the runs page (1,000 runs, first page) and the 100,000-report run: wall time and bytes of the
   page and of its curves (cold: the console's first read of the run; warm: from its memory);
   with ``--browser``, also the time to the curves drawn in chromium;
2. how long a new report takes to reach an open page (the run's event stream, as the page reads it);
3. the console's CPU while 20 pages follow 4 live runs.

    .venv/bin/python bench/console.py [--runs 1000] [--reports 100000] [--pages 20] [--browser]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from trainwire_core.v1 import common_pb2, coordinator_pb2

PAGE_TARGET_S = 1.0
LATENCY_TARGET_S = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMicroseconds(int(seconds * 1e6))
    return ts


def seed(state_path: str, store: str, num_runs: int, num_reports: int) -> str:
    """Writes finished runs straight into the coordinator's SQLite state; returns the long run's id.

    The events of the long run go in one transaction (the coordinator writes them one by one as
    reports arrive; a bench has no time for 100,000 fits' worth of reports).
    """
    from trainwire_coordinator.metadata import open_metadata_store
    from trainwire_coordinator.metadata.base import RunRecord

    metadata = open_metadata_store(state_path)
    start = time.time() - 86400
    long_id = ""
    for i in range(num_runs + 1):
        run_id = uuid.uuid4().hex[:16]
        created = start + i * 60
        name = "bench-100k" if i == num_runs else f"bench-run-{i:04d}"
        run = coordinator_pb2.Run(
            run_id=run_id,
            name=name,
            state=common_pb2.SUCCEEDED if i % 10 else common_pb2.FAILED,
            state_reason="" if i % 10 else "rank 0 raised ValueError: bench",
            framework=["torch", "xgboost", "lightgbm", "sklearn"][i % 4],
            path=f"{store}/runs/{run_id}",
            created_at=_timestamp(created),
            updated_at=_timestamp(created + 30),
            last_report_index=num_reports if i == num_runs else 10,
            submitted_by="bench",
        )
        run.request.scaling_config.num_workers = 2
        run.latest_metrics.update({"loss": 0.1})
        metadata.create_run(RunRecord(run_id, name, run.state, created, created + 30, run.SerializeToString()))
        if i == num_runs:
            long_id = run_id
            events = []
            for k in range(1, num_reports + 1):
                metrics = struct_pb2.Struct()
                metrics.update({"loss": 1.0 / k + (k % 97) * 1e-4, "accuracy": 1 - 1.0 / k, "lr": 0.01})
                event = coordinator_pb2.RunEvent(
                    event_id=k,
                    run_id=run_id,
                    time=_timestamp(created + k * 0.01),
                    metrics=coordinator_pb2.MetricsEvent(report_index=k, metrics=metrics),
                )
                events.append((run_id, k, event.SerializeToString()))
            end = coordinator_pb2.RunEvent(
                event_id=num_reports + 1,
                run_id=run_id,
                time=_timestamp(created + num_reports * 0.01),
                state_change=coordinator_pb2.StateChange(state=common_pb2.SUCCEEDED),
            )
            events.append((run_id, num_reports + 1, end.SerializeToString()))
            conn = metadata._conn  # the bench's bulk insert; the coordinator appends one at a time
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO events (run_id, event_id, payload) VALUES (?, ?, ?)", events)
            conn.execute("COMMIT")
    metadata.close()
    return long_id


class Service:
    """A child process in a session of its own, ended by its process group."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)  # noqa: SIM115

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def cpu_s(self) -> float:
        """User and system CPU of the process so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_http(url: str, service: Service, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            raise SystemExit(f"exited early:\n{service.log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout_s}s:\n{service.log.read_text()}")


def get(url: str) -> tuple[float, int, bytes]:
    """Wall time and bytes of one GET (the whole body)."""
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as answer:
        body = answer.read()
    return time.perf_counter() - start, len(body), body


def timed(label: str, url: str, repeats: int = 5) -> dict[str, Any]:
    walls, size = [], 0
    for _ in range(repeats):
        wall, size, _ = get(url)
        walls.append(wall)
    row = {"what": label, "median_s": statistics.median(walls), "max_s": max(walls), "bytes": size}
    print(f"  {label:<46} {row['median_s'] * 1000:8.1f} ms (max {row['max_s'] * 1000:.1f})  {size / 1024:8.1f} KiB")
    return row


def sse_events(url: str, stop: threading.Event, on_event) -> None:
    """Reads a server-sent event stream, calling ``on_event(kind, data)``, until ``stop`` is set."""
    with urllib.request.urlopen(url, timeout=60) as answer:
        kind, data = "message", ""
        for raw in answer:
            if stop.is_set():
                return
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif not line and data:
                on_event(kind, json.loads(data))
                if kind == "end":
                    return
                kind, data = "message", ""


def live_loop(config):
    """Reports the wall time of each report, ``per_s`` times a second."""
    import time

    from trainwire import train

    for i in range(config["reports"]):
        train.report({"sent_at": time.time(), "i": i})
        time.sleep(1.0 / config["per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument("--pages", type=int, default=20, help="pages following live runs for the CPU figure")
    parser.add_argument("--live-runs", type=int, default=4)
    parser.add_argument("--browser", action="store_true", help="also time the run page in chromium (Playwright)")
    args = parser.parse_args()

    from trainwire import RunConfig, ScalingConfig
    from trainwire.client import CoordinatorClient
    from trainwire.trainer import DataParallelTrainer

    home = Path(tempfile.mkdtemp(prefix="trainwire-console-bench-"))
    store, state = str(home / "store"), str(home / "state.db")
    started = time.perf_counter()
    long_id = seed(state, store, args.runs, args.reports)
    print(f"seeded {args.runs + 1} runs, one of {args.reports} reports, in {time.perf_counter() - started:.1f}s")

    port, http_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    coordinator = Service(
        [sys.executable, "-m", "trainwire_coordinator", "--port", str(port), "--store", store, "--state", state]
        + ["--ray-num-cpus", "4"],
        home / "coordinator.log",
    )
    console = Service(
        [sys.executable, "-m", "trainwire_console", "--address", address, "--port", str(http_port)],
        home / "console.log",
    )
    base = f"http://127.0.0.1:{http_port}"
    results: dict[str, Any] = {"pages": []}
    try:
        wait_http(f"{base}/healthz", console, 120)
        print("page loads (median of 5; the console and coordinator share this machine's 2 cores):")
        results["pages"].append(timed(f"runs page ({args.runs + 1} runs, first 50)", f"{base}/"))
        results["pages"].append(timed("runs page, filtered by name", f"{base}/?name=bench-run-09"))
        cold_wall, cold_bytes, body = get(f"{base}/runs/{long_id}")
        print(f"  {'100k run page, first open (HTML)':<46} {cold_wall * 1000:8.1f} ms  {cold_bytes / 1024:8.1f} KiB")
        series = f"{base}/api/runs/{long_id}/series?width=1000"
        start = time.perf_counter()
        while True:
            wall, size, body = get(series)
            if json.loads(body)["complete"]:
                break
        history_s = time.perf_counter() - start
        print(f"  {'100k run curves, first open (whole history)':<46} {history_s * 1000:8.1f} ms")
        results["history_cold_s"] = history_s
        results["pages"].append(timed("100k run page (HTML), warm", f"{base}/runs/{long_id}"))
        results["pages"].append(timed("100k run curves (3 metrics, 1000 px), warm", series))
        if args.browser:
            walls = results["browser_s"] = browser_open(f"{base}/runs/{long_id}")
            shown = ", ".join(f"{w * 1000:.0f}" for w in walls)
            print(f"  {'100k run page in chromium, to curves drawn':<46} {shown} ms (new browser, then again)")

        client = CoordinatorClient(address)

        def start_live(name: str, reports: int, per_s: float) -> str:
            trainer = DataParallelTrainer(
                live_loop,
                train_loop_config={"reports": reports, "per_s": per_s},
                scaling_config=ScalingConfig(num_workers=1),
                run_config=RunConfig(name=name, verbose=0),
            )
            return client.fit(trainer.build_request(client)).run_id

        # Report-to-page latency: the run's event stream as an open page reads it.
        run_id = start_live("bench-latency", 60, 5)
        latencies: list[float] = []
        stop = threading.Event()

        def on_latency(kind: str, data: dict) -> None:
            if kind == "metrics" and "sent_at" in data["metrics"]:
                latencies.append(time.time() - data["metrics"]["sent_at"])

        get(f"{base}/runs/{run_id}")
        sse_events(f"{base}/api/runs/{run_id}/events", stop, on_latency)
        latencies = latencies[5:]  # the first ones were reported before the page opened
        if latencies:
            q = statistics.quantiles(latencies, n=20)
            results["latency"] = {"p50_s": statistics.median(latencies), "p95_s": q[-1], "max_s": max(latencies)}
            print(
                f"report to page: p50 {results['latency']['p50_s'] * 1000:.0f} ms, p95 {q[-1] * 1000:.0f} ms, "
                f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} reports (target < {LATENCY_TARGET_S:.0f} s)"
            )

        # CPU while pages follow live runs (each page: the run's events and its logs, and the runs list).
        runs = [start_live(f"bench-follow-{i}", 150, 5) for i in range(args.live_runs)]
        stop = threading.Event()
        counted = [0]

        def count(kind: str, data: Any) -> None:
            counted[0] += 1

        threads = []
        for i in range(args.pages):
            run = runs[i % len(runs)]
            for url in (f"{base}/api/runs/{run}/events", f"{base}/api/runs/{run}/logs"):
                threads.append(threading.Thread(target=sse_events, args=(url, stop, count), daemon=True))
        for _ in range(args.pages):
            threads.append(
                threading.Thread(target=sse_events, args=(f"{base}/api/runs/live", stop, count), daemon=True)
            )
        for t in threads:
            t.start()
        time.sleep(8)  # the runs start and the pages connect
        cpu0, wall0, events0 = console.cpu_s(), time.perf_counter(), counted[0]
        time.sleep(10)
        cpu = (console.cpu_s() - cpu0) / (time.perf_counter() - wall0)
        events = (counted[0] - events0) / 10
        stop.set()
        results["follow_cpu"] = {"pages": args.pages, "cpu_fraction": cpu, "events_per_s": events}
        print(
            f"console CPU while {args.pages} pages follow {len(runs)} live runs: {cpu * 100:.1f}% of one core "
            f"({events:.0f} events/s delivered)"
        )
        for run in runs:
            client.cancel_run(run)
        client.close()
    finally:
        console.stop()
        coordinator.stop()
    print(json.dumps(results, indent=2))
    return 0


def browser_open(url: str) -> list[float]:
    """Seconds from navigation to the curves drawn in Debian's chromium: a new browser, then the same one again."""
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    args += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    walls = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        for _ in range(3):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            start = time.perf_counter()
            page.goto(url)
            page.wait_for_function("window.trainwire.chartPoints() > 0", timeout=60_000)
            walls.append(time.perf_counter() - start)
            page.close()
        browser.close()
    return walls


if __name__ == "__main__":
    sys.exit(main())
