"""Stoppers as Ray's: the same decisions on the same results, and RunConfig(stop=...) deciding a search's trials."""

from __future__ import annotations

import datetime
import inspect

import numpy as np
import pytest
import ray.tune.stopper as ray_stopper

from trainwire import RunConfig, tune
from trainwire.tune import TuneConfig, Tuner, stopper
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2

NAMES = sorted(ray_stopper.__all__)


def _params(cls) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults (annotations name each package's own classes)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]


def test_the_module_has_rays_names_and_signatures():
    assert sorted(stopper.__all__) == NAMES
    for name in NAMES:
        ours, theirs = getattr(stopper, name), getattr(ray_stopper, name)
        assert _params(ours) == _params(theirs), name
    assert tune.Stopper is stopper.Stopper


def _results(seed: int, trials: int = 3, steps: int = 12) -> list[tuple[str, dict]]:
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        for t in range(trials):
            # Converging values: plateaus come, at different steps per trial.
            out.append((f"t{t}", {"loss": float(1 / (step + 1) + rng.normal(0, 0.02 / (step + 1))), "step": step}))
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.MaximumIterationStopper(max_iter=4),
        lambda m: m.TrialPlateauStopper(metric="loss", std=0.02, num_results=3, grace_period=2),
        lambda m: m.TrialPlateauStopper(metric="loss", std=0.05, metric_threshold=0.3, mode="min"),
        lambda m: m.ExperimentPlateauStopper(metric="loss", std=0.05, top=3, mode="min", patience=2),
        lambda m: m.ExperimentPlateauStopper(metric="loss", std=0.2, top=4, mode="max"),
        lambda m: m.FunctionStopper(lambda trial_id, result: result["loss"] < 0.2),
        lambda m: m.CombinedStopper(m.MaximumIterationStopper(6), m.TrialPlateauStopper(metric="loss", std=0.03)),
        lambda m: m.NoopStopper(),
    ],
    ids=[
        "max-iter",
        "trial-plateau",
        "trial-plateau-threshold",
        "experiment-plateau",
        "experiment-max",
        "function",
        "combined",
        "noop",
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decisions_equal_rays_on_the_same_results(make, seed):
    ours, theirs = make(stopper), make(ray_stopper)
    for trial_id, result in _results(seed):
        assert ours(trial_id, dict(result)) == theirs(trial_id, dict(result))
        assert ours.stop_all() == theirs.stop_all()


def test_bad_arguments_raise_as_rays():
    for m in (stopper, ray_stopper):
        with pytest.raises(ValueError):
            m.ExperimentPlateauStopper(metric="loss", mode="sideways")
        with pytest.raises(ValueError):
            m.TrialPlateauStopper(metric="loss", metric_threshold=1.0)
        with pytest.raises(ValueError):
            m.TimeoutStopper("ten seconds")
    assert stopper.TimeoutStopper(datetime.timedelta(seconds=3))._timeout_seconds == 3


def test_run_config_takes_what_rays_takes():
    RunConfig(stop={"training_iteration": 3})
    RunConfig(stop=stopper.MaximumIterationStopper(3))
    RunConfig(stop=[stopper.MaximumIterationStopper(3), stopper.NoopStopper()])
    RunConfig(stop=lambda trial_id, result: False)
    with pytest.raises(InvalidArgumentError) as err:
        RunConfig(stop=[lambda trial_id, result: False])
    assert err.value.field == "run_config.stop"
    with pytest.raises(InvalidArgumentError) as err:  # a trainer's own run takes a dict only
        RunConfig(stop=stopper.NoopStopper()).to_proto()
    assert err.value.field == "run_config.stop"


# --- in a search -------------------------------------------------------------------------
def _steps(config):
    import time

    for i in range(config.get("steps", 20)):
        tune.report({"loss": config["x"] / (i + 1), "i": i})
        time.sleep(0.1)  # a step of work: a stop reaches the trial long before its 40th


class StopAfterTwoTrials(stopper.Stopper):
    """A user's Stopper: stops the search once two trials have reported their third result."""

    def __init__(self):
        self.seen = set()

    def __call__(self, trial_id, result):
        if result["training_iteration"] >= 3:
            self.seen.add(trial_id)
        return False

    def stop_all(self):
        return len(self.seen) >= 2


def _search(name, stop, num_samples=1, max_concurrent=None):
    return Tuner(
        tune.with_resources(_steps, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([1.0, 2.0]), "steps": 40},
        tune_config=TuneConfig(
            metric="loss", mode="min", num_samples=num_samples, max_concurrent_trials=max_concurrent
        ),
        run_config=RunConfig(name=name, stop=stop, verbose=0),
    ).fit()


@pytest.mark.timeout(300)
def test_stoppers_stop_a_searchs_trials_as_finished(coordinator):
    grid = _search("stop-max-iter", stopper.MaximumIterationStopper(max_iter=3))
    assert grid.num_errors == 0
    states = [(t.state, t.state_reason) for t in grid.trials]
    assert all(state == common_pb2.SUCCEEDED for state, _ in states), states
    assert all("stopped by the search's stopper" in reason for _, reason in states), states
    # Stopped at its third result, as Ray's: the report waits for the stopper's decision.
    assert list(grid.get_dataframe()["training_iteration"]) == [3, 3]

    grid = _search("stop-dict", {"training_iteration": 2})
    assert [t.state for t in grid.trials] == [common_pb2.SUCCEEDED] * 2
    assert list(grid.get_dataframe()["training_iteration"]) == [2, 2]

    grid = _search("stop-function", lambda trial_id, result: result["loss"] < 0.5)
    assert all(r.metrics["loss"] <= 0.5 for r in grid) and grid.num_errors == 0


@pytest.mark.timeout(300)
def test_a_stoppers_stop_all_ends_the_search(coordinator):
    # Four trials, two at a time: once two have reported three results, the rest never start.
    grid = _search("stop-all", StopAfterTwoTrials(), num_samples=2, max_concurrent=2)
    assert grid.tune_run.state == common_pb2.SUCCEEDED
    started = [t for t in grid.trials if t.run_id]
    assert len(started) == 2, [(t.state, t.state_reason) for t in grid.trials]
    assert all("stop_all" in t.state_reason for t in grid.trials), [t.state_reason for t in grid.trials]


def _tight(config):
    for i in range(config.get("steps", 20)):
        # No work between reports: the loop runs far ahead of any stop that lags behind its results.
        tune.report({"mean_accuracy": (i + 1) / 10})


class StopAllAt(stopper.Stopper):
    """The Tune guide's CustomStopper: stops every trial, and the search, once one reaches the accuracy."""

    def __init__(self, accuracy):
        self.accuracy, self.should_stop = accuracy, False

    def __call__(self, trial_id, result):
        self.should_stop = self.should_stop or result["mean_accuracy"] >= self.accuracy
        return self.should_stop

    def stop_all(self):
        return self.should_stop


def _tight_search(name, stop):
    return Tuner(
        tune.with_resources(_tight, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([1, 2]), "steps": 20},
        run_config=RunConfig(name=name, stop=stop, verbose=0),
    ).fit()


@pytest.mark.timeout(300)
def test_a_stopper_ends_a_trial_at_the_result_it_decided_on(coordinator):
    # As in Ray, a trial's report waits for the stopper: two trials at once, each stopped at its 8th of 20.
    grid = _tight_search("exact-function", lambda trial_id, result: result["training_iteration"] >= 8)
    assert grid.num_errors == 0
    assert [t.state for t in grid.trials] == [common_pb2.SUCCEEDED] * 2
    assert [r.metrics["training_iteration"] for r in grid] == [8, 8]
    assert [len(r.metrics_dataframe) for r in grid] == [8, 8]
    assert all("training_iteration 8" in t.state_reason for t in grid.trials), [t.state_reason for t in grid.trials]

    # A Stopper with stop_all: the trial that reached 0.8 ends at it, and no trial goes past it.
    grid = _tight_search("exact-stop-all", StopAllAt(0.8))
    assert grid.num_errors == 0
    iterations = [r.metrics.get("training_iteration", 0) for r in grid]
    assert max(iterations) == 8 and all(n <= 8 for n in iterations), iterations


def _fails_or_waits(config):
    import time

    if config["should_fail"]:
        raise RuntimeError("Failing (on purpose)!")
    time.sleep(30)  # far longer than the other trial takes to fail: it must be stopped, not finish
    tune.report({"mean_accuracy": 0.9})


@pytest.mark.timeout(300)
def test_fail_fast_ends_the_search_at_the_first_trial_error(coordinator):
    from trainwire import FailureConfig

    grid = Tuner(
        tune.with_resources(_fails_or_waits, {"cpu": 0.5}),
        param_space={"should_fail": tune.grid_search([True, False])},
        run_config=RunConfig(name="fail-fast", failure_config=FailureConfig(fail_fast=True), verbose=0),
    ).fit()
    failed, other = grid.trials
    assert failed.state == common_pb2.FAILED and grid.num_errors == 1
    assert "fail_fast" in other.state_reason, other.state_reason
    assert not grid[1].metrics.get("training_iteration"), grid[1].metrics


def _slow_steps(config):
    import time

    for i in range(100):  # 20 s unless stopped
        time.sleep(0.2)
        tune.report({"i": i})


@pytest.mark.timeout(300)
def test_a_stop_on_time_total_s_and_a_time_budget_stop_a_lone_trial(coordinator):
    # time_total_s is one of Ray's auto-filled keys: the loop never reports it.
    grid = Tuner(_slow_steps, run_config=RunConfig(name="stop-time", stop={"time_total_s": 2}, verbose=0)).fit()
    trial = grid.trials[0]
    assert trial.state == common_pb2.SUCCEEDED and "run_config.stop" in trial.state_reason, trial.state_reason
    assert grid[0].metrics["training_iteration"] < 40

    # The search's only trial was suggested at once: its budget still ends it.
    grid = Tuner(
        _slow_steps, tune_config=TuneConfig(time_budget_s=2), run_config=RunConfig(name="budget", verbose=0)
    ).fit()
    trial = grid.trials[0]
    assert trial.early_stopped and "time budget" in trial.state_reason, trial.state_reason
    assert grid[0].metrics["training_iteration"] < 40
