"""Collectives across a run's workers, as ``ray.train.collective`` (Ray Train V2).

Inside ``train_loop_per_worker``::

    from trainwire.train.collective import barrier, broadcast_from_rank_zero

    value = broadcast_from_rank_zero(value if train.get_context().get_world_rank() == 0 else None)
    barrier()

Every worker must call the same collectives in the same order (each waits for all). On the
cluster the worker processes meet at one small actor per run attempt, as Ray's workers meet at
their controller's synchronization actor; a loop in local mode (one process) returns at once.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import cloudpickle

from trainwire.train.session import get_session

__all__ = ["barrier", "broadcast_from_rank_zero"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# As Ray's: broadcasts are for small values (a path, a flag, a dict of a few keys); larger
# ones still work but are logged, since every call goes through one actor.
_MAX_BROADCAST_SIZE_BYTES = 1000


def broadcast_from_rank_zero(data: T) -> T:
    """Rank 0's ``data`` on every worker; a barrier too (all workers must call it).

    Args:
        data: A small picklable value; only rank 0's is used.

    Returns:
        Rank 0's ``data``.

    Raises:
        pickle.PicklingError, TypeError: ``data`` cannot be pickled.
    """
    return broadcast(data, "trainwire.train.collective.broadcast_from_rank_zero")


def barrier() -> None:
    """Waits until every worker of the run has called ``barrier()``."""
    broadcast(None, "trainwire.train.collective.barrier")


def broadcast(data: T, caller: str) -> T:
    """Rank 0's ``data`` on every worker, for ``caller`` (the public function's name, for messages)."""
    if data is not None:
        size = len(cloudpickle.dumps(data))
        if size > _MAX_BROADCAST_SIZE_BYTES:
            logger.warning(
                "%s: %d bytes exceeds the maximum broadcast size of %d bytes",
                caller,
                size,
                _MAX_BROADCAST_SIZE_BYTES,
            )
    session = get_session()
    sync: Any = getattr(session, "broadcast_from_rank_zero", None)
    if sync is None:
        # A session without one runs one process (local mode): it is rank 0 and alone.
        return data
    return sync(data, caller)
