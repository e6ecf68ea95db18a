"""A search request's checks: bad input is refused, naming its field, before anything is recorded."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from trainwire_coordinator.admission.fit_checks import FitChecks, carried_code
from trainwire_coordinator.tune.schedulers import make_scheduler
from trainwire_coordinator.tune.searchers import (
    SEARCHER_FIELD,
    Searcher,
    library_error,
    make_searcher,
    planned_trials,
)
from trainwire_coordinator.tune.space import SearchSpace, nest
from trainwire_coordinator.tune.trials import trial_request
from trainwire_core.auth import SUBMIT_CODE, Caller
from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError, ResourceExhaustedError, TrainwireError
from trainwire_core.structs import merge_dicts
from trainwire_core.v1 import tune_pb2

MAX_TRIALS = 2**31 - 1


@dataclass
class Plan:
    """A search request, checked: what samples it and what stops its trials."""

    space: SearchSpace
    searcher: Searcher
    scheduler: Any
    metric: str
    mode: str


def make_plan(request: tune_pb2.TuneRequest) -> Plan:
    """Checks a TuneRequest (bad input: InvalidArgumentError naming the field) and builds its parts."""
    config = request.tune_config
    metric, mode = config.metric, config.mode
    scheduler_spec, alg = config.scheduler, config.search_alg
    if mode not in ("", "min", "max"):
        raise InvalidArgumentError(f"mode must be 'min' or 'max', got {mode!r}", field="tune_config.mode")
    for name, value in (("scheduler", scheduler_spec.mode), ("search_alg", alg.mode)):
        if value not in ("", "min", "max"):
            raise InvalidArgumentError("mode must be 'min' or 'max'", field=f"tune_config.{name}.mode")
    if config.num_samples < -1:
        raise InvalidArgumentError(
            "num_samples must be >= 1, or -1 with a time budget", field="tune_config.num_samples"
        )
    if config.num_samples == -1 and config.time_budget_s <= 0:
        raise InvalidArgumentError(
            "num_samples=-1 runs until time_budget_s is spent; set one", field="tune_config.time_budget_s"
        )
    if config.max_concurrent_trials < 0:
        raise InvalidArgumentError("max_concurrent_trials must be >= 0", field="tune_config.max_concurrent_trials")
    if not math.isfinite(config.time_budget_s) or config.time_budget_s < 0:
        raise InvalidArgumentError("time_budget_s must be >= 0", field="tune_config.time_budget_s")
    # A multi-objective OptunaSearch names its metrics itself (TuneConfig's metric then only ranks results).
    needs_metric = scheduler_spec.name not in ("", "fifo", "pbt_replay") or (alg.name == "optuna" and not alg.metrics)
    owners = (("scheduler", scheduler_spec.metric, scheduler_spec.mode), ("search_alg", alg.metric, alg.mode))
    for owner, own_metric, own_mode in owners:
        if own_metric and metric and own_metric != metric:
            raise InvalidArgumentError(
                f"the {owner}'s metric {own_metric!r} differs from tune_config.metric {metric!r}; set it once",
                field=f"tune_config.{owner}.metric",
            )
        metric, mode = metric or own_metric, mode or own_mode
    if needs_metric and not metric:
        raise InvalidArgumentError(
            "this scheduler or search algorithm compares trials: set tune_config.metric and mode",
            field="tune_config.metric",
        )
    if metric and not mode:
        raise InvalidArgumentError("a metric needs a mode, 'min' or 'max'", field="tune_config.mode")
    if not request.trainer.framework:
        raise InvalidArgumentError("the trainer of a search is required", field="trainer.framework")
    space = SearchSpace(request)
    total = planned_trials(config.num_samples, space)
    if total is not None and total > MAX_TRIALS:
        # A search's record counts its trials in an int32.
        raise InvalidArgumentError(
            f"num_samples ({config.num_samples}) times the grid's {space.num_grid_points} points is {total} trials; "
            f"at most {MAX_TRIALS}",
            field="tune_config.num_samples",
        )
    if scheduler_spec.name in ("pbt", "pb2", "pbt_replay") and alg.name not in ("", "variant_generator"):
        raise InvalidArgumentError(  # as Ray's on_trial_add
            f"Search algorithms cannot be used with {scheduler_spec.name} schedulers. Please remove {alg.name}.",
            field="tune_config.search_alg.name",
        )
    scheduler = make_scheduler(scheduler_spec, mode, metric)
    return Plan(space, make_searcher(request, space, mode), scheduler, metric, mode)


def carries_code(request: tune_pb2.TuneRequest) -> bool:
    """Whether the search sends code to run: its trainer's, a stopper, PBT's functions, a define-by-run
    space or a sample_from function."""
    return (
        carried_code(request.trainer)
        or bool(request.pickled_stopper)
        or bool(request.tune_config.scheduler.pickled_code)
        or bool(request.tune_config.search_alg.pickled_space)
        or any(p.domain.sampler == "sample_from" for p in request.search_space)
        or any(_pickled_alternatives(p) for p in request.search_space)
    )


def _pickled_alternatives(param: tune_pb2.SearchParam) -> bool:
    """Whether a grid or choice carries pickled objects (dataset refs and preprocessor specs are not code)."""
    return any(a.WhichOneof("value") == "pickled" for a in param.domain.alternatives)


def check_access(request: tune_pb2.TuneRequest, caller: Caller, allow_pickled_code: bool) -> None:
    """Refuses a search the caller may not submit, or pickled code this coordinator does not accept."""
    for i, param in enumerate(request.search_space):
        # Checked first, so the refusal names the searched field (not only the scope).
        if not _pickled_alternatives(param):
            continue
        where = "param_space." + ".".join(param.path)
        if SUBMIT_CODE not in caller.scopes:
            raise PermissionDeniedError(
                f"{where} searches pickled objects: token {caller.name!r} lacks the {SUBMIT_CODE!r} scope",
                field=where,
            )
        if not allow_pickled_code:
            raise PermissionDeniedError(
                f"this coordinator does not accept pickled code: {where} searches pickled objects",
                field=f"search_space[{i}].domain.alternatives",
            )
    if carries_code(request):
        caller.require(SUBMIT_CODE)
    if request.pickled_stopper and not allow_pickled_code:
        raise PermissionDeniedError(
            "this coordinator does not accept pickled code: a Stopper or stop function needs it; give a dict",
            field="run_config.stop",
        )
    if request.tune_config.scheduler.pickled_code and not allow_pickled_code:
        raise PermissionDeniedError(
            "this coordinator does not accept pickled code: PBT's functions need it; give lists or search domains",
            field="tune_config.scheduler.pickled_code",
        )
    if request.tune_config.search_alg.pickled_space and not allow_pickled_code:
        raise PermissionDeniedError(
            "this coordinator does not accept pickled code: OptunaSearch's define-by-run space needs it; "
            "give a dict of search domains",
            field="tune_config.search_alg.pickled_space",
        )
    for i, param in enumerate(request.search_space):
        if param.domain.sampler == "sample_from" and not allow_pickled_code:
            raise PermissionDeniedError(
                "this coordinator does not accept pickled code: sample_from needs it",
                field=f"search_space[{i}].domain.pickled_function",
            )


async def check_first_trial(request: tune_pb2.TuneRequest, checks: FitChecks) -> None:
    """Checks the trainer as the first trial would run it: bad input before anything is recorded."""
    plan = await asyncio.to_thread(make_plan, request)  # its own: the check's suggestion is no trial
    try:
        # A define-by-run space is the user's code: it runs in the search's actor, not at the request.
        values = plan.searcher.suggest(0) if plan.searcher.total != 0 and not plan.searcher.remote else {}
    except Exception as exc:  # the algorithm refused the request's space: the caller's input
        raise library_error(plan.searcher.display_name, exc, SEARCHER_FIELD, started=False) from exc
    config = merge_dicts(plan.space.constants, nest(values or {}))
    prefix = "param_space" if "scaling_config" in config else "trainer"
    fit = trial_request(request.trainer, config, "check", "", request.search_space)
    try:
        await asyncio.to_thread(checks.validate, fit)
    except ResourceExhaustedError as exc:
        raise InvalidArgumentError(exc.message, field=f"{prefix}.{exc.field}" if exc.field else prefix) from None
    except TrainwireError as exc:
        exc.field = f"trainer.{exc.field}" if exc.field else "trainer"
        raise
    await _check_alternatives(request, config, checks)


async def _check_alternatives(request: tune_pb2.TuneRequest, config: dict[str, Any], checks: FitChecks) -> None:
    """Checks each dataset and declarative preprocessor alternative as a trial would run it.

    The first trial checks one of each; without this, a bad URI among the others would fail only the
    trials that draw it. Pickled alternatives are not opened here (the coordinator runs no user code).
    """
    for i, param in enumerate(request.search_space):
        for j, alternative in enumerate(param.domain.alternatives):
            if alternative.WhichOneof("value") not in ("dataset", "preprocessor"):
                continue
            trial = merge_dicts(config, nest({tuple(param.path): alternative.label}))
            fit = trial_request(request.trainer, trial, "check", "", request.search_space)
            try:
                await asyncio.to_thread(checks.validate, fit)
            except InvalidArgumentError as exc:
                where = "param_space." + ".".join(param.path)
                raise InvalidArgumentError(
                    f"{where}: alternative {alternative.label!r}: {exc.message}",
                    field=f"search_space[{i}].domain.alternatives[{j}]",
                ) from None
