"""Ships one rank's stdout and stderr to the store, from a process of its own.

The worker points its file descriptors 1 and 2 at two pipes read here. Because this is
another process, a line the loop wrote before it was SIGKILLed or crashed is still in the
pipe: it is read at end of file and written with the rest. Lines go to the store in
numbered chunks (``trainwire_core.run_logs``), at most ``FLUSH_S`` apart, and a ``done``
file ends the stream. The lines are not copied to Ray's worker log files: Ray's log monitor
would read each again and send it to the coordinator's console, which costs the training
loop's host CPU for output nobody reads there.

Run as ``python -m trainwire_worker.log_shipper SPEC_JSON``.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time

from trainwire_core.run_logs import CHUNK_NAME, DONE_NAME, MAX_LINE_CHARS, chunk_name
from trainwire_core.storage import Store

FLUSH_S = 0.3
FLUSH_BYTES = 1 << 20
_READ = 1 << 16


class ChunkWriter:
    """Numbered chunks of one stream, rotated to stay under ``max_bytes``."""

    def __init__(self, store: Store, directory: str, max_bytes: int) -> None:
        self.store, self.directory, self.max_bytes = store, directory, max_bytes
        # Chunks are never rewritten: a stream started again (the same rank and attempt on a
        # new process) goes on after what is there.
        existing = [int(m.group(1)) for n in store.list_dir(directory) if (m := CHUNK_NAME.match(n))]
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
        self.store.write_bytes(f"{self.directory}/{chunk_name(self.seq)}", data)
        self.records, self.size = [], 0
        self.kept.append((self.seq, len(data)))
        # Rotation: the oldest chunks go once the stream holds more than max_bytes (the newest stays).
        while self.max_bytes and len(self.kept) > 1 and sum(n for _, n in self.kept) > self.max_bytes:
            seq, _ = self.kept.pop(0)
            self.store.fs.delete_file(f"{self.directory}/{chunk_name(seq)}")

    def done(self) -> None:
        self.flush()
        self.store.write_json(f"{self.directory}/{DONE_NAME}", {"chunks": self.seq})


def ship(spec: dict) -> None:
    store = Store(spec["store_uri"])
    writer = ChunkWriter(store, spec["directory"], int(spec["max_bytes"]))
    streams = {spec["stdout_fd"]: "stdout", spec["stderr_fd"]: "stderr"}
    partial = {fd: b"" for fd in streams}
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)

    def take(fd: int, data: bytes, now: float) -> None:
        buf = partial[fd] + data
        *lines, partial[fd] = buf.split(b"\n")
        for line in lines:
            text = line.decode("utf-8", errors="replace").rstrip("\r")
            for start in range(0, max(len(text), 1), MAX_LINE_CHARS):
                writer.add(now, streams[fd], text[start : start + MAX_LINE_CHARS])
        if len(partial[fd]) > 4 * MAX_LINE_CHARS:  # a line with no end: keep it bounded
            writer.add(now, streams[fd], partial[fd].decode("utf-8", errors="replace"))
            partial[fd] = b""

    last_flush = time.monotonic()
    while selector.get_map():
        timeout = 0 if stopping else max(0.0, FLUSH_S - (time.monotonic() - last_flush))
        events = selector.select(timeout)
        now = time.time()
        for key, _ in events:
            data = os.read(key.fd, _READ)
            if data:
                take(key.fd, data, now)
            else:
                selector.unregister(key.fd)
        if stopping and not events:
            break  # asked to stop, and nothing more is waiting
        if writer.size >= FLUSH_BYTES or time.monotonic() - last_flush >= FLUSH_S:
            writer.flush()
            last_flush = time.monotonic()
    now = time.time()
    for fd, rest in partial.items():
        if rest:
            writer.add(now, streams[fd], rest.decode("utf-8", errors="replace"))
    writer.done()


if __name__ == "__main__":
    ship(json.loads(sys.argv[1]))
