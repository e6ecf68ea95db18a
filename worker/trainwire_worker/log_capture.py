"""Captures a rank's stdout and stderr (``print``, ``logging``, C libraries) for the run's logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trainwire_core.run_logs import stream_dir
from trainwire_core.storage import Store

# Longest wait for the shipper once the loop is done (children holding the pipes open).
SHIPPER_DRAIN_S = 10.0


class LogCapture:
    """Points descriptors 1 and 2 at a shipper process for one rank's attempt, then back.

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
        self.proc: subprocess.Popen | None = None
        self.saved: tuple[int, int] | None = None

    def __enter__(self) -> LogCapture:
        sys.stdout.flush()
        sys.stderr.flush()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.saved = (os.dup(1), os.dup(2))
        spec = {**self.spec, "stdout_fd": out_r, "stderr_fd": err_r}
        # A session of its own: it outlives this process, to ship what a crash left in the pipes.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainwire_worker.log_shipper", json.dumps(spec)],
            pass_fds=(out_r, err_r),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(out_r)
        os.close(err_r)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(out_w)
        os.close(err_w)
        self._buffering = (sys.stdout.line_buffering, sys.stderr.line_buffering)
        # One write per line: what was printed is in the pipe if the process dies next.
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.saved is not None and self.proc is not None
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
        try:
            self.proc.wait(SHIPPER_DRAIN_S)
        except subprocess.TimeoutExpired:
            # Processes the loop started still hold the pipes: ship what is there and stop.
            self.proc.terminate()
            self.proc.wait(SHIPPER_DRAIN_S)
