"""A search's stopper (``RunConfig(stop=...)`` of a Tuner): user code, so it runs in an actor on the cluster.

The SDK pickles a ``tune.Stopper`` (or a function of ``(trial_id, result)``, as a
``FunctionStopper``); the coordinator never unpickles it. One actor per search holds it, as
Ray's controller holds its stopper, and is asked about each result in the order they came.
A trial run's report waits for the stopper's decision on it (``StopperGate``), as Ray's trial waits
for its controller, so a trial the stopper stops ends at the result it was stopped on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import cloudpickle
import ray
from google.protobuf import struct_pb2

from trainwire_coordinator.execution.callbacks import ControllerCallback
from trainwire_core.errors import FailedPreconditionError
from trainwire_core.v1 import coordinator_pb2

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


class Decider(Protocol):
    """A search's driver, as the gate sees it."""

    async def decided(self, run_id: str) -> None: ...


class StopperGate(ControllerCallback):
    """Holds a search's trial run on each report until the search's stopper has decided on it.

    Registered after the run's events (the search hears of the report there and submits it to its
    stopper): the run's report stream takes its next report once the decision is made, and a stop
    drops the reports the loop made meanwhile. Other runs pass at the cost of a dict look-up.

    Args:
        deciders: Trial run id -> an awaitable of the decision on its latest report (a search's driver).
    """

    def __init__(self, deciders: Mapping[str, Decider]) -> None:
        self.deciders = deciders

    async def on_report(self, run: coordinator_pb2.Run, report_index: int, metrics: struct_pb2.Struct) -> None:
        """Returns once the stopper has decided on this report (at once for a run of no search)."""
        driver = self.deciders.get(run.run_id)
        if driver is not None:
            await driver.decided(run.run_id)
