"""The runs list's live updates: one ListRuns poll a second, whatever the number of open lists."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from trainwire.client import CoordinatorClient
from trainwire_console.backend import run_summary
from trainwire_core.errors import TrainwireError

# Each open list may fall this many changes behind before it misses some (it then reloads).
QUEUE_SIZE = 1000


class RunsWatcher:
    """Polls the newest runs while any runs list is open, and hands each changed row to every list.

    Args:
        client: The coordinator's client.
        poll_s: Seconds between polls.
        page_size: How many of the newest runs each poll looks at.
    """

    def __init__(self, client: CoordinatorClient, poll_s: float = 1.0, page_size: int = 200) -> None:
        self.client = client
        self.poll_s = poll_s
        self.page_size = page_size
        self._subscribers: set[asyncio.Queue] = set()
        self._seen: dict[str, tuple] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self._task: asyncio.Task | None = None

    def subscribe(self) -> asyncio.Queue:
        """A queue of changed rows, starting with every row of the last poll (the page may be older)."""
        queue: asyncio.Queue = asyncio.Queue(QUEUE_SIZE)
        for row in self._latest.values():
            queue.put_nowait(row)
        self._subscribers.add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._poll())
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._subscribers.discard(queue)

    async def _poll(self) -> None:
        while self._subscribers:
            try:
                response = await asyncio.to_thread(self.client.list_runs, [], self.page_size, "")
            except TrainwireError:
                await asyncio.sleep(self.poll_s)
                continue
            now, latest = time.time(), {}
            for run in response.runs:
                row = latest[run.run_id] = run_summary(run, now)
                key = (run.state, run.state_reason, run.attempt, run.last_report_index)
                if self._seen.get(run.run_id) != key:
                    self._seen[run.run_id] = key
                    for queue in list(self._subscribers):
                        with contextlib.suppress(asyncio.QueueFull):
                            queue.put_nowait(row)
            self._latest = latest
            self._seen = {run_id: self._seen[run_id] for run_id in latest}
            await asyncio.sleep(self.poll_s)
