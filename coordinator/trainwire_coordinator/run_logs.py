"""WatchLogs: the workers' output, read from the store where their shippers write it.

The coordinator holds no log state: a reader's cursor names the chunk and line it got to
in each rank's stream, and chunks never change once written, so a stream resumed on a
restarted coordinator neither repeats nor skips a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

from google.protobuf import timestamp_pb2

from trainwire_core.errors import InvalidArgumentError, NotFoundError
from trainwire_core.run_logs import (
    CHUNK_NAME,
    DONE_NAME,
    LOGS_DIR,
    Position,
    chunk_name,
    decode_cursor,
    encode_cursor,
    parse_attempt_dir,
    parse_rank_dir,
)
from trainwire_core.storage import Store
from trainwire_core.v1 import coordinator_pb2

# After the run ends, how long to wait for shippers still writing their last chunk.
END_GRACE_S = 15.0


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
            rank = parse_rank_dir(rank_name)
            if rank is None or (self.ranks and rank not in self.ranks):
                continue
            for attempt_name in self.store.list_dir(f"{self.logs_dir}/{rank_name}"):
                attempt = parse_attempt_dir(attempt_name)
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
            ended = DONE_NAME in names
            chunks = sorted(int(m.group(1)) for n in names if (m := CHUNK_NAME.match(n)))
            at = self.positions.get(key, Position(0, -1))
            for seq in chunks:
                if seq < at.seq or seq <= self._read_through.get(key, 0):
                    continue
                try:
                    data = self.store.read_bytes(f"{directory}/{chunk_name(seq)}")
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
