"""What a run's watchers read: its events (``WatchRun``) and its workers' output (``WatchLogs``).

Events are appended to the metadata store and streamed to watchers, who are woken as each is
stored (``EventLog``). The workers' output is read from the store where their shippers write it
(``LogReader``): the coordinator holds no log state, a reader's cursor names the chunk and line
it got to in each rank's stream, and chunks never change once written, so a stream resumed on a
restarted coordinator neither repeats nor skips a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from google.protobuf import timestamp_pb2

from trainwire_coordinator.execution.run_state import TERMINAL
from trainwire_coordinator.metadata import MetadataStore
from trainwire_core.errors import InvalidArgumentError, NotFoundError
from trainwire_core.storage import (
    LOG_CHUNK_NAME,
    LOG_DONE_NAME,
    LOGS_DIR,
    Store,
    log_chunk_name,
    parse_log_attempt_dir,
    parse_log_rank_dir,
)
from trainwire_core.v1 import coordinator_pb2

# --- events (WatchRun) ---------------------------------------------------------------

# Events per WatchRunBatched message: a 100,000-report history in 20 messages.
BATCH_EVENTS = 5000


class EventLog:
    """Appends events and wakes the watchers of a run.

    Args:
        metadata: Where events are kept (any coordinator can read them).
        poll_s: How long a watcher sleeps before re-reading the store anyway.
        writes: The one thread that writes metadata, so writes land in the order they were made.
    """

    def __init__(self, metadata: MetadataStore, poll_s: float = 1.0, writes: ThreadPoolExecutor | None = None) -> None:
        self.metadata = metadata
        self.poll_s = poll_s
        self.writes = writes or ThreadPoolExecutor(1, thread_name_prefix="trainwire-metadata")
        self._conditions: dict[str, asyncio.Condition] = defaultdict(asyncio.Condition)
        self._ended: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        # Called with each event once it is stored (searches act on their trials' reports as they come).
        self.observers: list[Callable[[coordinator_pb2.RunEvent], None]] = []

    async def append(self, event: coordinator_pb2.RunEvent) -> int:
        event.time.FromNanoseconds(time.time_ns())
        payload = event.SerializeToString()
        loop = asyncio.get_running_loop()
        event_id = await loop.run_in_executor(self.writes, self.metadata.append_event, event.run_id, payload)
        cond = self._conditions[event.run_id]
        async with cond:
            cond.notify_all()
        if event.HasField("state_change") and event.state_change.state in TERMINAL:
            self._ended[event.run_id].set()
        for observe in self.observers:
            observe(event)
        return event_id

    def ended(self, run_id: str) -> asyncio.Event:
        """Set once a run this coordinator runs has ended (a log follower need not wait for its next look)."""
        return self._ended[run_id]

    def forget(self, run_id: str) -> None:
        """Drops a finished run's wake-up condition; its watchers end on their next poll."""
        self._conditions.pop(run_id, None)
        self._ended.pop(run_id, None)

    async def watch(
        self, run_id: str, after_event_id: int, has_ended: Callable[[], bool], live: bool = True
    ) -> AsyncIterator[coordinator_pb2.RunEvent]:
        """Yields events after ``after_event_id`` until the run has ended and all are sent.

        ``has_ended`` may block (it reads the store): it runs off the event loop.
        """
        async for stored in self._watch_stored(run_id, after_event_id, has_ended, live, 500):
            for event_id, payload in stored:
                event = coordinator_pb2.RunEvent.FromString(payload)
                event.event_id = event_id
                yield event

    async def watch_batched(
        self, run_id: str, after_event_id: int, has_ended: Callable[[], bool], live: bool = True
    ) -> AsyncIterator[coordinator_pb2.RunEventBatch]:
        """``watch`` in batches of up to BATCH_EVENTS: a long run's history in a few messages."""
        async for stored in self._watch_stored(run_id, after_event_id, has_ended, live, BATCH_EVENTS):
            yield coordinator_pb2.RunEventBatch.FromString(batch_bytes(stored))

    async def _watch_stored(
        self, run_id: str, after_event_id: int, has_ended: Callable[[], bool], live: bool, limit: int
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Each read of stored ``(event_id, payload)`` pairs, until the run has ended and all are read."""
        # Only a run this coordinator is running gets wake-ups; others are read by polling.
        cond = self._conditions[run_id] if live else asyncio.Condition()
        ended = False
        while True:
            batch = await asyncio.to_thread(self.metadata.read_events, run_id, after_event_id, limit)
            if batch:
                after_event_id = batch[-1][0]
                yield batch
                continue
            if ended:
                return
            # The final state event is written before the run record says so,
            # so one more read after seeing the end cannot miss it.
            ended = await asyncio.to_thread(has_ended)
            if ended:
                continue
            async with cond:
                try:
                    await asyncio.wait_for(cond.wait(), self.poll_s)
                except TimeoutError:
                    pass


def batch_bytes(stored: list[tuple[int, bytes]]) -> bytes:
    """A serialized RunEventBatch of stored events, each with its id, built without parsing them.

    A stored payload is a serialized RunEvent without its id; appending field 1 sets it (the
    last value of a field wins), and each event is one length-delimited ``events`` entry.
    """
    parts = []
    for event_id, payload in stored:
        event = payload + b"\x08" + _varint(event_id)
        parts.append(b"\x0a" + _varint(len(event)) + event)
    return b"".join(parts)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --- the workers' output (WatchLogs) -------------------------------------------------

# After the run ends, how long to wait for shippers still writing their last chunk.
END_GRACE_S = 15.0
_CURSOR_PART = re.compile(r"^(\d{1,6})\.(\d{1,6}):(\d{1,8})\.(\d{1,9})$")


@dataclass(frozen=True)
class Position:
    """The last line read of one stream: chunk ``seq``, line ``line`` (0-based) of it."""

    seq: int
    line: int


def encode_cursor(positions: dict[tuple[int, int], Position]) -> str:
    """``rank.attempt:seq.line`` per stream, comma-separated: where a reader got to."""
    return ",".join(f"{r}.{a}:{p.seq}.{p.line}" for (r, a), p in sorted(positions.items()))


def decode_cursor(cursor: str) -> dict[tuple[int, int], Position]:
    """The positions a cursor holds.

    Raises:
        ValueError: Not a cursor ``encode_cursor`` wrote.
    """
    positions: dict[tuple[int, int], Position] = {}
    if not cursor:
        return positions
    if len(cursor) > 100_000:
        raise ValueError("cursor is too long")
    for part in cursor.split(","):
        m = _CURSOR_PART.match(part)
        if not m:
            raise ValueError(f"bad cursor part {part[:40]!r}")
        r, a, seq, line = map(int, m.groups())
        positions[(r, a)] = Position(seq, line)
    return positions


class LogReader:
    """Reads one run's log streams from its store, resuming from a cursor.

    Args:
        store: The run's store.
        run_dir: The run's directory in it.
        ranks: Only these ranks (empty: all).
        after: A cursor from an earlier ``LogLine``.
    """

    def __init__(self, store: Store, run_dir: str, ranks: list[int], after: str) -> None:
        if any(r < 0 for r in ranks):
            raise InvalidArgumentError("ranks must be >= 0", field="ranks")
        try:
            self.positions = decode_cursor(after)
        except ValueError as exc:
            raise InvalidArgumentError(f"after is not a cursor of this run's logs: {exc}", field="after") from exc
        self.store, self.ranks = store, set(ranks)
        self.logs_dir = f"{run_dir}/{LOGS_DIR}"
        # Chunks never change: the last one read to its end per stream, and the streams whose
        # ``done`` file was seen with every chunk read, are not read or listed again.
        self._read_through: dict[tuple[int, int], int] = {}
        self._finished: set[tuple[int, int]] = set()

    def streams(self) -> list[tuple[int, int, str]]:
        """(rank, attempt, directory) of every stream written so far, by attempt then rank."""
        found = []
        for rank_name in self.store.list_dir(self.logs_dir):
            rank = parse_log_rank_dir(rank_name)
            if rank is None or (self.ranks and rank not in self.ranks):
                continue
            for attempt_name in self.store.list_dir(f"{self.logs_dir}/{rank_name}"):
                attempt = parse_log_attempt_dir(attempt_name)
                if attempt is not None:
                    found.append((attempt, rank, f"{self.logs_dir}/{rank_name}/{attempt_name}"))
        return [(rank, attempt, d) for attempt, rank, d in sorted(found)]

    def all_done(self) -> bool:
        """Whether every stream has ended and ``read_new`` has returned all of it."""
        return all((rank, attempt) in self._finished for rank, attempt, _ in self.streams())

    def read_new(self) -> list[coordinator_pb2.LogLine]:
        """Every line written since the cursor, each with the cursor that resumes after it."""
        out = []
        for rank, attempt, directory in self.streams():
            key = (rank, attempt)
            if key in self._finished:
                continue
            names = self.store.list_dir(directory)
            # The shipper writes ``done`` after its last chunk: seen in this listing, every chunk is in it.
            ended = LOG_DONE_NAME in names
            chunks = sorted(int(m.group(1)) for n in names if (m := LOG_CHUNK_NAME.match(n)))
            at = self.positions.get(key, Position(0, -1))
            for seq in chunks:
                if seq < at.seq or seq <= self._read_through.get(key, 0):
                    continue
                try:
                    data = self.store.read_bytes(f"{directory}/{log_chunk_name(seq)}")
                except NotFoundError:
                    continue  # rotated away between listing and reading
                for index, raw in enumerate(data.splitlines()):
                    if seq == at.seq and index <= at.line:
                        continue
                    try:
                        record = json.loads(raw)
                    except ValueError:
                        continue
                    self.positions[key] = Position(seq, index)
                    when = timestamp_pb2.Timestamp()
                    when.FromNanoseconds(int(float(record.get("t", 0)) * 1e9))
                    out.append(
                        coordinator_pb2.LogLine(
                            world_rank=rank,
                            attempt=attempt,
                            time=when,
                            stream=str(record.get("s", "")),
                            text=str(record.get("l", "")),
                            cursor=encode_cursor(self.positions),
                        )
                    )
                self._read_through[key] = seq
            if ended:
                self._finished.add(key)
        return out


# Lines per streamed message: one message per line would cap a stream at a few thousand lines/s.
BATCH_LINES = 1000


async def watch_logs(
    reader: LogReader,
    follow: bool,
    has_ended: Callable[[], bool],
    poll_s: float = 0.3,
    run_ended: asyncio.Event | None = None,
) -> AsyncIterator[coordinator_pb2.LogLines]:
    """Streams what the reader finds; with ``follow``, until the run has ended and its streams are done.

    ``run_ended``, set when the run ends, cuts the wait for the next look short: a ``fit()``
    that prints the workers' lines returns as soon as the last ones are read.
    """
    ended_at: float | None = None
    loop = asyncio.get_running_loop()
    while True:
        # The run's end is read before the lines: a line written before it is not missed.
        ended = follow and await asyncio.to_thread(has_ended)
        lines = await asyncio.to_thread(reader.read_new)
        for start in range(0, len(lines), BATCH_LINES):
            yield coordinator_pb2.LogLines(lines=lines[start : start + BATCH_LINES])
        if not follow or (ended and await asyncio.to_thread(reader.all_done)):
            return
        if ended:
            ended_at = ended_at or loop.time()
            if loop.time() - ended_at > END_GRACE_S:
                return  # a shipper that never finished (its host went away)
            await asyncio.sleep(poll_s)
        elif run_ended is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run_ended.wait(), poll_s)
        else:
            await asyncio.sleep(poll_s)
