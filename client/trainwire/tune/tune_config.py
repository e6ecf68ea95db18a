"""``TuneConfig``, as ``ray.tune.TuneConfig``."""

from __future__ import annotations

import datetime
import enum
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from trainwire.tune.schedulers import TrialScheduler
from trainwire.tune.search.searcher import Searcher, check_mode
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2


@dataclass
class TuneConfig:
    """How a search runs.

    Args:
        metric: The metric trials are compared on (reported by the training loop).
        mode: "min" or "max".
        search_alg: A search algorithm (default: ``BasicVariantGenerator``, random and grid search).
        scheduler: A trial scheduler (default: ``FIFOScheduler``).
        num_samples: Samples of the search space (each grid point repeated as often); -1: until
            ``time_budget_s`` runs out.
        max_concurrent_trials: At most this many trials at once (None: as many as the cluster holds).
        time_budget_s: No trial starts after this many seconds, and running ones are stopped.
        reuse_actors, trial_name_creator, trial_dirname_creator: Accepted for Ray's signature;
            they have no effect (each trial is a run of its own, named ``<search name>_<index>``).
    """

    metric: str | None = None
    mode: str | None = None
    search_alg: Searcher | None = None
    scheduler: TrialScheduler | None = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | datetime.timedelta | None = None
    reuse_actors: bool = False
    trial_name_creator: Callable[..., str] | None = None
    trial_dirname_creator: Callable[..., str] | None = None

    def __post_init__(self) -> None:
        check_mode(self.mode, "tune_config.mode")
        if self.search_alg is not None and not isinstance(self.search_alg, Searcher):
            raise InvalidArgumentError(
                "tune_config.search_alg must be a trainwire.tune search algorithm, "
                f"got {type(self.search_alg).__name__}",
                field="tune_config.search_alg",
            )
        if self.scheduler is not None and not isinstance(self.scheduler, TrialScheduler):
            raise InvalidArgumentError(
                f"tune_config.scheduler must be a trainwire.tune.schedulers scheduler, "
                f"got {type(self.scheduler).__name__}",
                field="tune_config.scheduler",
            )
        for part, name in ((self.search_alg, "search_alg"), (self.scheduler, "scheduler")):
            if part is None:
                continue
            # As Ray: the metric and mode are given once, to TuneConfig or to the part.
            for attr in ("metric", "mode"):
                # A multi-objective searcher's lists are its own: TuneConfig's metric then ranks results only.
                own = getattr(part, attr)
                # Ray's searchers take TuneConfig's metric beside their own (the same one; the coordinator
                # refuses two different ones), its schedulers refuse it.
                same = name == "search_alg" and getattr(self, attr) == own
                if getattr(self, attr) is not None and own is not None and not isinstance(own, list) and not same:
                    raise InvalidArgumentError(
                        f"{attr} is given to both TuneConfig and its {name}: give it to one of them",
                        field=f"tune_config.{name}.{attr}",
                    )
        n = self.num_samples
        if isinstance(n, bool) or not isinstance(n, int) or not (n >= 1 or n == -1):
            raise InvalidArgumentError(
                f"tune_config.num_samples must be an integer >= 1 (or -1 with a time budget), got {n!r}",
                field="tune_config.num_samples",
            )
        m = self.max_concurrent_trials
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise InvalidArgumentError(
                f"tune_config.max_concurrent_trials must be None or an integer >= 1, got {m!r}",
                field="tune_config.max_concurrent_trials",
            )
        if n == -1 and self.time_budget_s is None:
            raise InvalidArgumentError(
                "tune_config.num_samples=-1 runs until time_budget_s runs out: give time_budget_s",
                field="tune_config.num_samples",
            )
        if self.time_budget_s is not None:
            budget = self.time_budget_s
            seconds = budget.total_seconds() if isinstance(budget, datetime.timedelta) else budget
            is_number = isinstance(seconds, numbers.Real) and not isinstance(seconds, bool)
            if not is_number or not math.isfinite(seconds) or seconds <= 0:
                raise InvalidArgumentError(
                    f"tune_config.time_budget_s must be a number of seconds > 0, got {budget!r}",
                    field="tune_config.time_budget_s",
                )

    @property
    def budget_seconds(self) -> float:
        budget = self.time_budget_s
        if budget is None:
            return 0.0
        return budget.total_seconds() if isinstance(budget, datetime.timedelta) else float(budget)

    def to_proto(self) -> tune_pb2.TuneConfig:
        """The config as the coordinator's Tune request carries it."""
        msg = tune_pb2.TuneConfig(
            metric=self.metric or "",
            mode=self.mode or "",
            num_samples=self.num_samples,
            max_concurrent_trials=self.max_concurrent_trials or 0,
            time_budget_s=self.budget_seconds,
        )
        if self.search_alg is not None:
            msg.search_alg.CopyFrom(self.search_alg.to_proto())
        if self.scheduler is not None:
            msg.scheduler.CopyFrom(self.scheduler.to_proto())
        return msg


def default_metric_mode(config: tune_pb2.TuneConfig) -> tuple[str, str]:
    """The search's metric and mode: TuneConfig's, else its search algorithm's or scheduler's."""
    metric = config.metric or config.search_alg.metric or config.scheduler.metric
    mode = config.mode or config.search_alg.mode or config.scheduler.mode
    return metric, mode


__all__ = ["ResumeConfig", "TuneConfig", "default_metric_mode"]


@dataclass
class ResumeConfig:
    """How ``tune.run(resume=...)`` treats a search's trials, as ``ray.tune.ResumeConfig``.

    A trainwire search never stopped (it runs in the coordinator): resuming follows it. Finished
    trials are kept (SKIP); unfinished ones go on (RESUME) or stop now as finished (SKIP); failed
    ones stay failed (SKIP), go on from their latest checkpoint (RESUME) or start again (RESTART),
    as ``Tuner.restore``'s ``resume_errored`` / ``restart_errored``.
    """

    class ResumeType(enum.Enum):
        """What to do with the trials of one state."""

        RESUME = "resume"
        RESTART = "restart"
        SKIP = "skip"

    finished: str = ResumeType.SKIP
    unfinished: str = ResumeType.RESUME
    errored: str = ResumeType.SKIP

    def __post_init__(self) -> None:
        kinds = self.ResumeType
        allowed = {
            "finished": (kinds.SKIP,),
            "unfinished": (kinds.RESUME, kinds.SKIP),
            "errored": (kinds.SKIP, kinds.RESUME, kinds.RESTART),
        }
        for name, choices in allowed.items():
            value = getattr(self, name)
            if not any(value in (choice, choice.value) for choice in choices):
                raise InvalidArgumentError(
                    f"resume_config.{name} can be {' or '.join(repr(c.value) for c in choices)}, got {value!r}: a "
                    "trainwire search runs in the coordinator and is followed (finished trials are kept)",
                    field=f"resume_config.{name}",
                )

    def _is(self, name: str, kind: ResumeConfig.ResumeType) -> bool:
        value = getattr(self, name)
        return value in (kind, kind.value)

    def request(self, tune_id: str) -> tune_pb2.ResumeTuneRequest | None:
        """The ResumeTune request these modes ask of the search (None: Ray's defaults, nothing to ask)."""
        kinds = self.ResumeType
        unfinished = self._is("unfinished", kinds.RESUME)
        resume, restart = self._is("errored", kinds.RESUME), self._is("errored", kinds.RESTART)
        if unfinished and not resume and not restart:
            return None
        return tune_pb2.ResumeTuneRequest(
            tune_id=tune_id, resume_unfinished=unfinished, resume_errored=resume, restart_errored=restart
        )
