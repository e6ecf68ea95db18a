"""Where a run attempt's workers meet for ``trainwire.train.collective`` (barrier, broadcast).

One small async actor per run attempt, named after it, created by whichever worker comes
first (``get_if_exists``): Ray Train V2's synchronization actor, without a controller process.
It asks for no CPU, so it fits beside the run's reservation. Each worker numbers its collective
calls; call ``n`` of every rank meets in round ``n``. When every rank has left (its loop ended),
the actor exits; if its creator dies first (a failed attempt), Ray ends it with its owner.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# How often a worker waiting at a collective says which ranks it waits for (Ray's default).
WARN_INTERVAL_S = 60.0


@dataclass
class _Round:
    caller: str
    event: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: set[int] = field(default_factory=set)
    returned: int = 0
    data: Any = None
    error: str = ""


class SyncPoint:
    """The meeting point of one run attempt's ``world_size`` workers (run as a Ray actor)."""

    def __init__(self, world_size: int) -> None:
        self._world_size = world_size
        self._rounds: dict[int, _Round] = {}
        self._left: set[int] = set()

    async def broadcast_from_rank_zero(self, seq: int, world_rank: int, data: Any, caller: str) -> tuple[Any, str]:
        """Waits for every rank's call ``seq``; returns (rank 0's data, an error or "")."""
        meeting = self._rounds.setdefault(seq, _Round(caller))
        if meeting.caller != caller and not meeting.error:
            # Ranks that call different collectives would wait for each other forever.
            meeting.error = (
                f"collective call #{seq + 1} differs between workers: {meeting.caller} on one, "
                f"{caller} on rank {world_rank}; every worker must call the same collectives in the same order"
            )
            meeting.event.set()
        meeting.arrived.add(world_rank)
        if world_rank == 0:
            meeting.data = data
        if len(meeting.arrived) >= self._world_size:
            meeting.event.set()
        await meeting.event.wait()
        meeting.returned += 1
        if meeting.returned >= self._world_size:
            del self._rounds[seq]
        return meeting.data, meeting.error

    def missing(self, seq: int) -> list[int]:
        """The ranks that have not reached call ``seq`` yet."""
        meeting = self._rounds.get(seq)
        arrived = meeting.arrived if meeting else set()
        return sorted(set(range(self._world_size)) - arrived)

    def leave(self, world_rank: int) -> None:
        """``world_rank``'s loop has ended; the last rank to leave ends the actor."""
        self._left.add(world_rank)
        if len(self._left) >= self._world_size:
            import ray

            ray.actor.exit_actor()


def sync_point(run_id: str, attempt: int, world_size: int) -> Any:
    """The handle of this run attempt's meeting point, created on first use."""
    import ray

    actor_cls = ray.remote(SyncPoint)
    return actor_cls.options(
        name=f"trainwire-sync:{run_id}:{attempt}",
        get_if_exists=True,
        num_cpus=0,
        max_restarts=0,
    ).remote(world_size)


class Collectives:
    """One worker's side of the collectives: numbers its calls and waits at the meeting point."""

    def __init__(self, run_id: str, attempt: int, world_rank: int, world_size: int) -> None:
        self._key = (run_id, attempt, world_size)
        self._rank = world_rank
        self._seq = 0
        self._actor: Any = None

    def broadcast_from_rank_zero(self, data: Any, caller: str) -> Any:
        import ray

        if self._actor is None:
            self._actor = sync_point(*self._key)
        seq, self._seq = self._seq, self._seq + 1
        ref = self._actor.broadcast_from_rank_zero.remote(seq, self._rank, data, caller)
        start = time.monotonic()
        while not ray.wait([ref], timeout=WARN_INTERVAL_S)[0]:
            missing = ray.get(self._actor.missing.remote(seq))
            logger.warning(
                "%s: rank %d has waited %.0f s for ranks %s; every worker must call it",
                caller,
                self._rank,
                time.monotonic() - start,
                missing,
            )
        value, error = ray.get(ref)
        if error:
            raise RuntimeError(error)
        return value

    def close(self) -> None:
        """This worker's loop has ended: tells the meeting point (without waiting)."""
        if self._actor is not None:
            self._actor.leave.remote(self._rank)
            self._actor = None
