"""``ray.tune.schedulers.trial_scheduler``: the schedulers' base class, FIFO, and the argument checks they share."""

from __future__ import annotations

import numbers
from typing import Any

from trainwire.tune.search.searcher import check_mode
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import tune_pb2

__all__ = ["FIFOScheduler", "TrialScheduler"]


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise InvalidArgumentError(f"scheduler.{name} must be a number > 0, got {value!r}", field=f"scheduler.{name}")
    return float(value)


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"scheduler.{name} must be a number, got {value!r}", field=f"scheduler.{name}")
    return float(value)


def _options(msg: tune_pb2.TrialScheduler, options: dict[str, Any]) -> tune_pb2.TrialScheduler:
    msg.options.CopyFrom(to_struct(options, "scheduler"))
    return msg


class TrialScheduler:
    """Base of the schedulers (``ray.tune.schedulers.TrialScheduler``)."""

    name = ""
    # Ray's decisions, by their names.
    CONTINUE, PAUSE, STOP, NOOP = "CONTINUE", "PAUSE", "STOP", "NOOP"

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        check_mode(mode, "scheduler.mode")
        self.metric, self.mode = metric, mode

    def to_proto(self) -> tune_pb2.TrialScheduler:
        """The scheduler as the coordinator's Tune request names it."""
        return tune_pb2.TrialScheduler(name=self.name, metric=self.metric or "", mode=self.mode or "")


class FIFOScheduler(TrialScheduler):
    """Runs every trial to its end, in the order they were created (the default)."""

    name = "fifo"

    def __init__(self) -> None:
        super().__init__()
