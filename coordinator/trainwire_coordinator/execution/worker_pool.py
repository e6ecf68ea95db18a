"""A warm pool of worker groups: starting a worker process and importing a framework takes seconds.

After a successful run of a backend whose workers are safe to reuse, the
group (with its placement group) waits here for the next run of the same
shape (several of one shape, for a search's concurrent trials). Idle groups
are ended after ``idle_s``, and at once when another run needs their resources.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwire_coordinator.execution.placement import WorkerGroup

logger = logging.getLogger(__name__)


def _clear_state(worker: Any) -> None:
    worker.state.clear()


# Idle groups kept per shape: as many as a search runs trials of that shape at once, within reason.
MAX_IDLE_PER_SHAPE = 8


class WorkerPool:
    """Idle worker groups keyed by what they were started with, several per key.

    A search runs several trials of one shape at once: each finds a warm group of its own.

    Args:
        idle_s: How long an idle group is kept; 0 disables the pool.
    """

    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._idle: dict[Hashable, list[tuple[Any, WorkerGroup, asyncio.TimerHandle]]] = {}
        self.reused = 0

    def acquire(self, key: Hashable) -> tuple[Any, WorkerGroup] | None:
        """Takes an idle group of this shape (the one that waited least), if there is one."""
        entries = self._idle.get(key)
        if not entries:
            return None
        pg, group, timer = entries.pop()
        if not entries:
            del self._idle[key]
        timer.cancel()
        self.reused += 1
        return pg, group

    async def release(self, key: Hashable, pg: Any, group: WorkerGroup) -> None:
        """Keeps a group that finished cleanly for the next run of the same shape."""
        if self.idle_s <= 0 or len(self._idle.get(key, ())) >= MAX_IDLE_PER_SHAPE:
            _end(pg, group, graceful=True)
            return
        try:
            await group.execute(_clear_state)
        except Exception:  # noqa: BLE001 - a worker that cannot be reset is not reused
            _end(pg, group, graceful=False)
            return
        timer = asyncio.get_running_loop().call_later(self.idle_s, self._expire, key, group)
        self._idle.setdefault(key, []).append((pg, group, timer))

    def _expire(self, key: Hashable, group: WorkerGroup) -> None:
        entries = self._idle.get(key, [])
        for i, (pg, idle, _) in enumerate(entries):
            if idle is group:
                del entries[i]
                if not entries:
                    del self._idle[key]
                _end(pg, idle, graceful=True)
                return

    def evict_all(self) -> bool:
        """Ends every idle group (their resources are needed); True if any was ended."""
        evicted = bool(self._idle)
        for key in list(self._idle):
            for pg, group, timer in self._idle.pop(key):
                timer.cancel()
                _end(pg, group, graceful=True)
        return evicted


def _end(pg: Any, group: WorkerGroup, graceful: bool) -> None:
    from ray.util.placement_group import remove_placement_group

    group.shutdown(graceful=graceful)
    remove_placement_group(pg)
