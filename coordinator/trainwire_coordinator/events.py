"""Run events: appended to the metadata store, streamed to watchers."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from trainwire_coordinator.metadata import MetadataStore
from trainwire_core.v1 import coordinator_pb2


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

    async def append(self, event: coordinator_pb2.RunEvent) -> int:
        event.time.FromNanoseconds(time.time_ns())
        payload = event.SerializeToString()
        loop = asyncio.get_running_loop()
        event_id = await loop.run_in_executor(self.writes, self.metadata.append_event, event.run_id, payload)
        cond = self._conditions[event.run_id]
        async with cond:
            cond.notify_all()
        return event_id

    def forget(self, run_id: str) -> None:
        """Drops a finished run's wake-up condition; its watchers end on their next poll."""
        self._conditions.pop(run_id, None)

    async def watch(
        self, run_id: str, after_event_id: int, has_ended: Callable[[], bool], live: bool = True
    ) -> AsyncIterator[coordinator_pb2.RunEvent]:
        """Yields events after ``after_event_id`` until the run has ended and all are sent.

        ``has_ended`` may block (it reads the store): it runs off the event loop.
        """
        # Only a run this coordinator is running gets wake-ups; others are read by polling.
        cond = self._conditions[run_id] if live else asyncio.Condition()
        ended = False
        while True:
            batch = await asyncio.to_thread(self.metadata.read_events, run_id, after_event_id, 500)
            for event_id, payload in batch:
                event = coordinator_pb2.RunEvent.FromString(payload)
                event.event_id = event_id
                after_event_id = event_id
                yield event
            if batch:
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
