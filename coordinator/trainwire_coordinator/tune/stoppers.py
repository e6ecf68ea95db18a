"""A search's stopper (``RunConfig(stop=...)`` of a Tuner): user code, so it runs in an actor on the cluster.

The SDK pickles a ``tune.Stopper`` (or a function of ``(trial_id, result)``, as a
``FunctionStopper``); the coordinator never unpickles it. One actor per search holds it, as
Ray's controller holds its stopper, and is asked about each result in the order they came.
"""

from __future__ import annotations

import logging
from typing import Any

import cloudpickle
import ray

from trainwire_core.errors import FailedPreconditionError

logger = logging.getLogger(__name__)

FIELD = "run_config.stop"


class StopperHost:
    """Holds a user's stopper on the cluster (a Ray actor of no CPU)."""

    def __init__(self, pickled: bytes) -> None:
        self.stopper = cloudpickle.loads(pickled)

    def decide(self, trial_id: str, result: dict[str, Any]) -> tuple[bool, bool]:
        """Whether to stop this trial, and whether to stop the whole search, after this result."""
        return bool(self.stopper(trial_id, result)), bool(self.stopper.stop_all())

    def stop_all(self) -> bool:
        return bool(self.stopper.stop_all())


class SearchStopper:
    """The driver's handle on its search's stopper actor.

    Args:
        pickled: The stopper's cloudpickle, from the Tune request.
    """

    def __init__(self, pickled: bytes) -> None:
        host = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(StopperHost)
        self.actor = host.remote(pickled)

    def decide(self, trial_id: str, result: dict[str, Any]) -> Any:
        """Submits a result now (so results reach the stopper in order); await the returned reference."""
        return self.actor.decide.remote(trial_id, result)

    async def answer(self, ref: Any) -> Any:
        """The stopper's answer; what it raised is the search's FAILED_PRECONDITION naming ``run_config.stop``."""
        try:
            return await ref
        except ray.exceptions.RayTaskError as exc:
            raise FailedPreconditionError(f"the search's stopper raised {exc.cause!r}", field=FIELD) from None
        except ray.exceptions.RayActorError as exc:  # it could not be unpickled, or its process died
            raise FailedPreconditionError(f"the search's stopper could not run: {exc}", field=FIELD) from None

    async def stop_all(self) -> bool:
        return bool(await self.answer(self.actor.stop_all.remote()))

    def close(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # already gone (Ray shut down with the coordinator)
            logger.debug("the stopper actor was already gone", exc_info=True)
