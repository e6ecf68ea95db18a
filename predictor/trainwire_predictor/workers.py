"""``--workers N``: N predictor processes on the same gRPC and REST ports, started and kept by one parent.

Every worker is a whole predictor (its own event loop, thread pool and model cache); the kernel
spreads connections over them (``SO_REUSEPORT`` on both ports). A connection stays with the
worker that accepted it, so one client on one HTTP/2 channel talks to one worker; many clients
(or a client's several channels) spread. Aliases and traffic policies are read from the store by
every worker, so they agree within ``index_refresh_s``.

The parent binds no listening socket and serves no request. It:

- reserves the ports (a bound, non-listening ``SO_REUSEPORT`` socket each: port 0 becomes one
  free port that every worker then binds, and a later restart finds it still ours);
- starts the workers, restarts one that dies (after a growing pause if it keeps dying), and on
  SIGTERM or SIGINT stops them all (SIGTERM, then SIGKILL past the stop deadline);
- serves ``--metrics-port``: prometheus_client's multiprocess mode (each worker writes its
  counters and histograms to memory-mapped files in ``PROMETHEUS_MULTIPROC_DIR``) summed over
  the workers, dead ones' counts included, and the workers' generation gauges (a snapshot each
  writes every second);
- owns the shared folder where each worker mirrors its Triton statistics
  (``statistics.SharedStatistics``), so ModelStatistics and ``/v2/models/stats`` answer for the
  whole group from any worker.

A worker learns its settings from the parent (a JSON document in the environment) and stops
when the parent's pipe on its standard input closes, however the parent ended.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from trainwire_core.serving import STOP_DEADLINE_S, MetricsServer, advertised_address, check_door

logger = logging.getLogger(__name__)

SETTINGS_ENV = "TRAINWIRE_PREDICTOR_WORKER_SETTINGS"
ROLE_ENV = "TRAINWIRE_PREDICTOR_WORKER_ROLE"
# The response header naming the worker process that answered (REST), for load checks and debugging.
PID_HEADER = "trainwire-worker-pid"
# A worker that dies sooner than this after its start is crash-looping: wait longer before the next.
STEADY_S = 10.0
MAX_RESTART_DELAY_S = 10.0
START_TIMEOUT_S = 300.0
GENERATION_SNAPSHOT_S = 1.0


@dataclass(frozen=True)
class WorkerRole:
    """What a worker process of a group is told besides its settings.

    Attributes:
        index: Its place in the group (0 .. N-1; a restarted worker keeps it).
        shared_dir: The group's folder: ``statistics/`` and ``generation/`` beneath it.
        metrics: Whether the parent serves metrics (so the worker records them).
    """

    index: int
    shared_dir: str
    metrics: bool

    @property
    def statistics_dir(self) -> str:
        return os.path.join(self.shared_dir, "statistics")

    @property
    def generation_file(self) -> str:
        return os.path.join(self.shared_dir, "generation", f"{self.index}.json")

    def to_env(self) -> str:
        return json.dumps({"index": self.index, "shared_dir": self.shared_dir, "metrics": self.metrics})

    @classmethod
    def from_env(cls, text: str) -> WorkerRole:
        doc = json.loads(text)
        return cls(int(doc["index"]), str(doc["shared_dir"]), bool(doc["metrics"]))


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, non-listening ``SO_REUSEPORT`` socket on ``host:port`` (0: a free port).

    The kernel hands connections only to listening sockets, so this one takes none; it keeps the
    port the group's while workers come and go.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def with_pid_header(app: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """An ASGI app that answers as ``app`` does, with ``trainwire-worker-pid: <this pid>`` on every response."""
    header = (PID_HEADER.encode(), str(os.getpid()).encode())

    async def wrapped(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_pid(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await app(scope, receive, send_with_pid)

    return wrapped


class GenerationPublisher:
    """A worker's generation metrics (collected from its decode engines), written to a file each second.

    Args:
        collector: The worker's generation collector (``metrics._GenerationCollector``).
        path: The worker's snapshot file (rewritten atomically).
    """

    def __init__(self, collector: Any, path: str) -> None:
        self.collector = collector
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainwire-generation-snapshot", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def publish(self) -> None:
        """Writes the current figures (one JSON list of metric families)."""
        families = [
            {
                "name": m.name,
                "type": m.type,
                "documentation": m.documentation,
                "samples": [[s.name, s.labels, s.value] for s in m.samples],
            }
            for m in self.collector.collect()
        ]
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(families, f)
        os.replace(tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(GENERATION_SNAPSHOT_S):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - a snapshot missed must not stop the next
                logger.exception("could not write the generation metrics' snapshot")


class GenerationSnapshots:
    """The parent's collector of the workers' generation snapshots, summed by metric and labels."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import Metric

        merged: dict[str, Metric] = {}
        sums: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        with contextlib.suppress(FileNotFoundError):
            names = sorted(os.listdir(self.directory))
            for name in names:
                if not name.endswith(".json"):
                    continue
                try:
                    with open(os.path.join(self.directory, name)) as f:
                        families = json.load(f)
                except (OSError, ValueError):
                    continue  # a worker gone with its file, or one being replaced
                for fam in families:
                    if fam["name"] not in merged:
                        merged[fam["name"]] = Metric(fam["name"], fam["documentation"], fam["type"])
                    for sample, labels, value in fam["samples"]:
                        key = (fam["name"], sample, tuple(sorted(labels.items())))
                        sums[key] = sums.get(key, 0.0) + value
        for (family, sample, labels), value in sums.items():
            merged[family].add_sample(sample, dict(labels), value)
        yield from merged.values()

    def describe(self) -> list[Any]:
        return []


class _Worker:
    """One worker process of the group, as the parent sees it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready = threading.Event()
        self.restart_delay_s = 0.5
        self.restart_at: float | None = None


class WorkerGroup:
    """The parent of ``--workers N``: starts, restarts and stops the worker processes.

    Args:
        settings: The predictor's settings (``workers`` > 1).
        command: The command that runs one worker (default: this interpreter on
            ``trainwire_predictor.server.worker_main``).
    """

    def __init__(self, settings: Any, command: list[str] | None = None) -> None:
        self.settings = settings
        self.command = command or [
            sys.executable,
            "-c",
            "from trainwire_predictor.server import worker_main; worker_main()",
        ]
        self.shared_dir = ""
        self.address = ""
        self.http_address = ""
        self.metrics_address = ""
        self.workers = [_Worker(i) for i in range(settings.workers)]
        self._reserved: list[socket.socket] = []
        self._worker_settings: Any = None
        self._metrics_server: MetricsServer | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    @property
    def pids(self) -> list[int]:
        """The live workers' process ids."""
        return [w.proc.pid for w in self.workers if w.proc is not None and w.proc.poll() is None]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Reserves the ports, starts every worker and waits until each listens; returns ``host:port``.

        Raises:
            RuntimeError: A worker exited while starting (its error is in the log above).
        """
        s = self.settings
        check_door(
            "the predictor", s.host, s.auth_token or s.tokens, s.allow_unauthenticated, "TRAINWIRE_PREDICTOR_AUTH_TOKEN"
        )
        self.shared_dir = tempfile.mkdtemp(prefix="trainwire-predictor-workers-")
        grpc_sock = reserve_port(s.host, s.port)
        self._reserved.append(grpc_sock)
        updates: dict[str, Any] = {"workers": 1, "metrics_port": 0, "port": grpc_sock.getsockname()[1]}
        if s.http_port is not None:
            http_sock = reserve_port(s.host, s.http_port)
            self._reserved.append(http_sock)
            updates["http_port"] = http_sock.getsockname()[1]
            self.http_address = advertised_address(s.host, updates["http_port"])
        self._worker_settings = s.model_copy(update=updates)
        self.address = advertised_address(s.host, updates["port"])
        if s.metrics_port:
            os.makedirs(self._metrics_dir, exist_ok=True)
            self._metrics_server = MetricsServer(self._metrics_registry(), s.host, s.metrics_port)
            self.metrics_address = advertised_address(s.host, self._metrics_server.port)
        for w in self.workers:
            self._spawn(w)
        deadline = time.monotonic() + timeout_s
        for w in self.workers:
            while not w.ready.wait(0.1):
                assert w.proc is not None
                if w.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"predictor worker {w.index} exited while starting (code {w.proc.returncode})")
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"predictor worker {w.index} did not start within {timeout_s:.0f} s")
        return self.address

    @property
    def _metrics_dir(self) -> str:
        return os.path.join(self.shared_dir, "prometheus")

    def _metrics_registry(self) -> Any:
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self._metrics_dir)
        registry.register(GenerationSnapshots(os.path.join(self.shared_dir, "generation")))  # type: ignore[arg-type]
        return registry

    def _spawn(self, w: _Worker) -> None:
        env = dict(os.environ)
        env[SETTINGS_ENV] = self._worker_settings.model_dump_json()
        env[ROLE_ENV] = WorkerRole(w.index, self.shared_dir, bool(self.settings.metrics_port)).to_env()
        if self.settings.metrics_port:
            env["PROMETHEUS_MULTIPROC_DIR"] = self._metrics_dir
        else:
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        w.ready.clear()
        w.started_at = time.monotonic()
        # stdin: a pipe only this parent holds; its end (however the parent ends) stops the worker.
        w.proc = subprocess.Popen(self.command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        threading.Thread(target=self._read_banner, args=(w, w.proc), daemon=True).start()

    def _read_banner(self, w: _Worker, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            logger.info("%s", line)
            if "listening on" in line:
                w.ready.set()

    def supervise(self, stop: threading.Event, poll_s: float = 0.2) -> None:
        """Restarts workers that die until ``stop`` is set."""
        while not stop.wait(poll_s):
            self.reap()

    def reap(self) -> None:
        """Restarts the workers that have died (each after its pause)."""
        now = time.monotonic()
        with self._lock:
            if self._stopping.is_set():
                return
            for w in self.workers:
                if w.proc is None or w.proc.poll() is None:
                    continue
                if w.restart_at is None:
                    lived = now - w.started_at
                    w.restart_delay_s = 0.5 if lived > STEADY_S else min(w.restart_delay_s * 2, MAX_RESTART_DELAY_S)
                    w.restart_at = now + w.restart_delay_s
                    logger.warning(
                        "predictor worker %d (pid %d) exited with %s; restarting in %.1f s",
                        w.index,
                        w.proc.pid,
                        w.proc.returncode,
                        w.restart_delay_s,
                    )
                    # Its generation gauges went with it; its counters (and statistics) stay counted.
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(self.shared_dir, "generation", f"{w.index}.json"))
                if now >= w.restart_at:
                    w.restart_at = None
                    self._spawn(w)

    def stop(self, deadline_s: float = STOP_DEADLINE_S) -> None:
        """Stops every worker (SIGTERM, SIGKILL past ``deadline_s``), the metrics server and the ports."""
        with self._lock:
            self._stopping.set()
            procs = [w.proc for w in self.workers if w.proc is not None]
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            end = time.monotonic() + deadline_s + 1.0
            for proc in procs:
                try:
                    proc.wait(max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                with contextlib.suppress(OSError):
                    if proc.stdin is not None:
                        proc.stdin.close()
            if self._metrics_server is not None:
                self._metrics_server.stop()
                self._metrics_server = None
            for sock in self._reserved:
                sock.close()
            self._reserved.clear()
            if self.shared_dir:
                shutil.rmtree(self.shared_dir, ignore_errors=True)


def run_group(settings: Any, banner: str = "trainwire predictor", signals: Iterable[int] = ()) -> None:
    """Runs a worker group until SIGTERM or SIGINT: the ``--workers N`` parent's whole life."""
    group = WorkerGroup(settings)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, *signals):
        signal.signal(sig, on_signal)
    try:
        address = group.start()
    except RuntimeError as exc:
        raise SystemExit(f"error: {exc}") from None
    if group.http_address:
        logger.info("Open Inference Protocol over REST on %s", group.http_address)
    if group.metrics_address:
        logger.info("Prometheus metrics on http://%s/metrics", group.metrics_address)
    logger.info("%d predictor workers: pids %s", len(group.workers), ", ".join(map(str, group.pids)))
    print(f"{banner} listening on {address}", flush=True)
    try:
        group.supervise(stop)
    finally:
        group.stop()
