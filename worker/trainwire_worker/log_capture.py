"""Captures a rank's stdout and stderr (``print``, ``logging``, C libraries) for the run's logs."""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading

from trainwire_core.run_logs import stream_dir
from trainwire_core.storage import Store

logger = logging.getLogger(__name__)

# Longest wait for the shipper to store a run's last lines.
SHIPPER_DRAIN_S = 10.0
# The worker's own stderr (Ray's log file), taken before any run points descriptor 2 elsewhere.
_WORKER_STDERR = os.dup(2)


class Shipper:
    """This worker process's log shipper (``log_shipper.serve``), and the pipes to it."""

    def __init__(self) -> None:
        out_r, self.out_w = os.pipe()
        err_r, self.err_w = os.pipe()
        control_r, self.control_w = os.pipe()
        self.ack_r, ack_w = os.pipe()
        fds = (out_r, err_r, control_r, ack_w)
        # A session of its own: it outlives this process, to ship what a crash left in the pipes.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainwire_worker.log_shipper", *map(str, fds)],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            # Not descriptors 1 and 2: during a run they are that run's capture.
            stdout=subprocess.DEVNULL,
            stderr=_WORKER_STDERR,
            start_new_session=True,
        )
        for fd in fds:
            os.close(fd)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def begin(self, spec: dict) -> None:
        os.write(self.control_w, b"BEGIN " + json.dumps(spec).encode() + b"\n")

    def end(self, timeout_s: float) -> bool:
        """Marks the run's end and waits until its lines are stored; False if the shipper did not answer."""
        try:
            os.write(self.control_w, b"END\n")
        except BrokenPipeError:
            return False
        ready, _, _ = select.select([self.ack_r], [], [], timeout_s)
        return bool(ready) and os.read(self.ack_r, 1) == b"k"

    def close(self) -> None:
        for fd in (self.out_w, self.err_w, self.control_w, self.ack_r):
            os.close(fd)
        if self.alive():
            self.proc.terminate()


_shipper: Shipper | None = None
_shipper_lock = threading.Lock()


def worker_shipper() -> Shipper:
    """The worker's shipper, started once (again if it died)."""
    global _shipper
    with _shipper_lock:
        if _shipper is not None and not _shipper.alive():
            _shipper.close()
            _shipper = None
        if _shipper is None:
            _shipper = Shipper()
        return _shipper


def _discard(shipper: Shipper) -> None:
    global _shipper
    with _shipper_lock:
        if _shipper is shipper:
            _shipper = None
    shipper.close()


class LogCapture:
    """Points descriptors 1 and 2 at the worker's shipper for one rank's attempt, then back.

    Args:
        store: The run's store (the shipper writes there).
        run_id: The run.
        rank: The rank's world rank.
        attempt: The attempt.
        max_bytes: The most the store keeps of this stream (older chunks are rotated away).
    """

    def __init__(self, store: Store, run_id: str, rank: int, attempt: int, max_bytes: int) -> None:
        self.spec = {
            "store_uri": store.uri_of(store.root),
            "directory": stream_dir(store.run_dir(run_id), rank, attempt),
            "max_bytes": max_bytes,
        }
        self.shipper: Shipper | None = None
        self.saved: tuple[int, int] | None = None

    def __enter__(self) -> LogCapture:
        sys.stdout.flush()
        sys.stderr.flush()
        self.shipper = worker_shipper()
        self.shipper.begin(self.spec)
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.shipper.out_w, 1)
        os.dup2(self.shipper.err_w, 2)
        self._buffering = (sys.stdout.line_buffering, sys.stderr.line_buffering)
        # One write per line: what was printed is in the pipe if the process dies next.
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.saved is not None and self.shipper is not None
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.dup2(self.saved[0], 1)
            os.dup2(self.saved[1], 2)
            os.close(self.saved[0])
            os.close(self.saved[1])
            sys.stdout.reconfigure(line_buffering=self._buffering[0])
            sys.stderr.reconfigure(line_buffering=self._buffering[1])
        if not self.shipper.end(SHIPPER_DRAIN_S):
            logger.warning("the log shipper did not store the run's last lines within %g s", SHIPPER_DRAIN_S)
            _discard(self.shipper)  # the next run starts a new one
