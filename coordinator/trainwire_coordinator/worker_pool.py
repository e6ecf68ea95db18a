"""A warm pool of worker groups: starting a worker process and importing a framework takes seconds.

After a successful run of a backend whose workers are safe to reuse, the
group (with its placement group) waits here for the next run of the same
shape. Idle groups are ended after ``idle_s``, and at once when another run
needs their resources.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainwire_coordinator.placement import WorkerGroup

logger = logging.getLogger(__name__)


def _clear_state(worker: Any) -> None:
    worker.state.clear()


class WorkerPool:
    """Idle worker groups keyed by what they were started with.

    Args:
        idle_s: How long an idle group is kept; 0 disables the pool.
    """

    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._idle: dict[Hashable, tuple[Any, WorkerGroup, asyncio.TimerHandle]] = {}
        self.reused = 0

    def acquire(self, key: Hashable) -> tuple[Any, WorkerGroup] | None:
        """Takes the idle group of this shape, if there is one."""
        entry = self._idle.pop(key, None)
        if entry is None:
            return None
        pg, group, timer = entry
        timer.cancel()
        self.reused += 1
        return pg, group

    async def release(self, key: Hashable, pg: Any, group: WorkerGroup) -> None:
        """Keeps a group that finished cleanly for the next run of the same shape."""
        if self.idle_s <= 0 or key in self._idle:
            _end(pg, group, graceful=True)
            return
        try:
            await group.execute(_clear_state)
        except Exception:  # noqa: BLE001 - a worker that cannot be reset is not reused
            _end(pg, group, graceful=False)
            return
        timer = asyncio.get_running_loop().call_later(self.idle_s, self._expire, key)
        self._idle[key] = (pg, group, timer)

    def _expire(self, key: Hashable) -> None:
        entry = self._idle.pop(key, None)
        if entry is not None:
            _end(entry[0], entry[1], graceful=True)

    def evict_all(self) -> bool:
        """Ends every idle group (their resources are needed); True if any was ended."""
        evicted = bool(self._idle)
        for key in list(self._idle):
            pg, group, timer = self._idle.pop(key)
            timer.cancel()
            _end(pg, group, graceful=True)
        return evicted


def _end(pg: Any, group: WorkerGroup, graceful: bool) -> None:
    from ray.util.placement_group import remove_placement_group

    group.shutdown(graceful=graceful)
    remove_placement_group(pg)
