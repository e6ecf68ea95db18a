"""Captures a rank's stdout and stderr (``print``, ``logging``, C libraries) and ships them to the store.

``LogCapture`` points the worker's file descriptors 1 and 2 at two pipes for one rank's
attempt; a shipper process of its own (``serve``, this module run as a script) reads them.
Because the shipper is another process, a line the loop wrote before it was SIGKILLed or
crashed is still in the pipe: it is read at end of file and written with the rest. Lines go to
the store in numbered chunks (``trainwire_core.storage``'s log layout), at most ``FLUSH_S`` apart, and a
``done`` file ends the stream. The lines are not copied to Ray's worker log files: Ray's log
monitor would read each again and send it to the coordinator's console, which costs the
training loop's host CPU for output nobody reads there.

A worker keeps one shipper for its lifetime (``worker_shipper``): starting an interpreter that
imports pyarrow, and tearing it down, took a few hundred milliseconds of every short run.
Lines on a control pipe mark each run: ``BEGIN <spec JSON>`` opens its stream, ``END``
drains the pipes into it, writes ``done`` and acknowledges on the ack pipe. A worker that
dies closes the control pipe: what is left in the pipes is shipped to the open run, and the
shipper exits.

The shipper runs as ``python -m trainwire_worker.log_capture STDOUT_FD STDERR_FD CONTROL_FD ACK_FD``.
"""

from __future__ import annotations

import json
import logging
import os
import select
import selectors
import subprocess
import sys
import threading
import time

from trainwire_core.storage import (
    LOG_CHUNK_NAME,
    LOG_DONE_NAME,
    MAX_LOG_LINE_CHARS,
    Store,
    log_chunk_name,
    log_stream_dir,
)

logger = logging.getLogger(__name__)

# The shipper's side (its own process).
FLUSH_S = 0.3
FLUSH_BYTES = 1 << 20
_READ = 1 << 16


class ChunkWriter:
    """Numbered chunks of one stream, rotated to stay under ``max_bytes``."""

    def __init__(self, store: Store, directory: str, max_bytes: int) -> None:
        self.store, self.directory, self.max_bytes = store, directory, max_bytes
        # Chunks are never rewritten: a stream started again (the same rank and attempt on a
        # new process) goes on after what is there.
        existing = [int(m.group(1)) for n in store.list_dir(directory) if (m := LOG_CHUNK_NAME.match(n))]
        self.seq = max(existing, default=0)
        self.kept: list[tuple[int, int]] = []  # (seq, bytes) of the chunks still stored
        self.records: list[bytes] = []
        self.size = 0

    def add(self, when: float, stream: str, text: str) -> None:
        record = json.dumps({"t": round(when, 6), "s": stream, "l": text}, ensure_ascii=False).encode() + b"\n"
        self.records.append(record)
        self.size += len(record)

    def flush(self) -> None:
        if not self.records:
            return
        self.seq += 1
        data = b"".join(self.records)
        self.store.write_bytes(f"{self.directory}/{log_chunk_name(self.seq)}", data)
        self.records, self.size = [], 0
        self.kept.append((self.seq, len(data)))
        # Rotation: the oldest chunks go once the stream holds more than max_bytes (the newest stays).
        while self.max_bytes and len(self.kept) > 1 and sum(n for _, n in self.kept) > self.max_bytes:
            seq, _ = self.kept.pop(0)
            self.store.fs.delete_file(f"{self.directory}/{log_chunk_name(seq)}")

    def done(self) -> None:
        self.flush()
        self.store.write_json(f"{self.directory}/{LOG_DONE_NAME}", {"chunks": self.seq})


class Segments:
    """The runs of one worker process on its two pipes, one open at a time."""

    def __init__(self, stdout_fd: int, stderr_fd: int) -> None:
        self.streams = {stdout_fd: "stdout", stderr_fd: "stderr"}
        self.partial = {fd: b"" for fd in self.streams}
        self.writer: ChunkWriter | None = None
        self.stores: dict[str, Store] = {}

    def begin(self, spec: dict) -> None:
        if self.writer is not None:
            self.end()
        uri = spec["store_uri"]
        store = self.stores.get(uri) or self.stores.setdefault(uri, Store(uri))
        self.writer = ChunkWriter(store, spec["directory"], int(spec["max_bytes"]))

    def take(self, fd: int, data: bytes, now: float) -> None:
        buf = self.partial[fd] + data
        *lines, self.partial[fd] = buf.split(b"\n")
        if self.writer is None:  # nothing is printed between runs; a stray line has no run to go to
            return
        for line in lines:
            text = line.decode("utf-8", errors="replace").rstrip("\r")
            for start in range(0, max(len(text), 1), MAX_LOG_LINE_CHARS):
                self.writer.add(now, self.streams[fd], text[start : start + MAX_LOG_LINE_CHARS])
        if len(self.partial[fd]) > 4 * MAX_LOG_LINE_CHARS:  # a line with no end: keep it bounded
            self.writer.add(now, self.streams[fd], self.partial[fd].decode("utf-8", errors="replace"))
            self.partial[fd] = b""

    def drain(self, fd: int) -> bool:
        """Reads what the pipe holds now; False at end of file."""
        while True:
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                return True
            if not data:
                return False
            self.take(fd, data, time.time())

    def end(self) -> None:
        now = time.time()
        for fd, rest in self.partial.items():
            if rest and self.writer is not None:
                self.writer.add(now, self.streams[fd], rest.decode("utf-8", errors="replace"))
            self.partial[fd] = b""
        if self.writer is not None:
            self.writer.done()
            self.writer = None


def serve(stdout_fd: int, stderr_fd: int, control_fd: int, ack_fd: int) -> None:
    """Ships every run of one worker process, as the control pipe marks them (see the module's doc)."""
    segments = Segments(stdout_fd, stderr_fd)
    for fd in (stdout_fd, stderr_fd):
        os.set_blocking(fd, False)
    selector = selectors.DefaultSelector()
    for fd in (control_fd, stdout_fd, stderr_fd):
        selector.register(fd, selectors.EVENT_READ)
    commands = b""
    worker_gone = False
    last_flush = time.monotonic()
    while selector.get_map():
        events = selector.select(max(0.0, FLUSH_S - (time.monotonic() - last_flush)))
        ready = {key.fd for key, _ in events}
        if control_fd in ready:  # before the data: a run's BEGIN was written before its first line
            data = os.read(control_fd, _READ)
            if not data:
                selector.unregister(control_fd)
                worker_gone = True
            commands += data
            while b"\n" in commands:
                line, commands = commands.split(b"\n", 1)
                if line.startswith(b"BEGIN "):
                    segments.begin(json.loads(line[6:]))
                elif line == b"END":
                    # Everything the run wrote is in the pipes by now: it wrote END after its last line.
                    for fd in (stdout_fd, stderr_fd):
                        if fd in selector.get_map() and not segments.drain(fd):
                            selector.unregister(fd)
                    segments.end()
                    os.write(ack_fd, b"k")
        for fd in ready & {stdout_fd, stderr_fd}:
            if fd in selector.get_map() and not segments.drain(fd):
                selector.unregister(fd)
        if worker_gone and not (selector.get_map().keys() & {stdout_fd, stderr_fd}):
            break  # the worker died and its pipes have ended: the open run gets what was left
        if segments.writer is not None and (
            segments.writer.size >= FLUSH_BYTES or time.monotonic() - last_flush >= FLUSH_S
        ):
            segments.writer.flush()
            last_flush = time.monotonic()
        elif segments.writer is None:
            last_flush = time.monotonic()
    segments.end()


# The worker's side.
# Longest wait for the shipper to store a run's last lines.
SHIPPER_DRAIN_S = 10.0
# The worker's own stderr (Ray's log file), taken before any run points descriptor 2 elsewhere.
_WORKER_STDERR = os.dup(2)


class Shipper:
    """This worker process's log shipper (``serve``, in a process of its own), and the pipes to it."""

    def __init__(self) -> None:
        out_r, self.out_w = os.pipe()
        err_r, self.err_w = os.pipe()
        control_r, self.control_w = os.pipe()
        self.ack_r, ack_w = os.pipe()
        fds = (out_r, err_r, control_r, ack_w)
        # A session of its own: it outlives this process, to ship what a crash left in the pipes.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainwire_worker.log_capture", *map(str, fds)],
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
            "directory": log_stream_dir(store.run_dir(run_id), rank, attempt),
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


if __name__ == "__main__":
    serve(*(int(fd) for fd in sys.argv[1:5]))
