"""Run events: appended to the metadata store, streamed to watchers."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from trainwire_coordinator.execution.run_state import TERMINAL
from trainwire_coordinator.metadata import MetadataStore
from trainwire_core.v1 import coordinator_pb2

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
