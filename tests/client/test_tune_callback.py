"""``tune.Callback``: Ray's hooks, called in the caller's program from the search's event stream."""

from __future__ import annotations

import inspect

import pytest
import ray.tune

from trainwire import RunConfig, tune
from trainwire.tune import TuneConfig, Tuner

HOOKS = [n for n in vars(ray.tune.Callback) if n.startswith("on_") or n in ("setup", "get_state", "set_state")]


def test_callback_has_rays_hooks_and_parameters():
    for name in HOOKS:
        ours = list(inspect.signature(getattr(tune.Callback, name)).parameters)
        assert ours == list(inspect.signature(getattr(ray.tune.Callback, name)).parameters), name


class Recorder(tune.Callback):
    def __init__(self):
        self.calls: list[tuple] = []

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.calls.append(("setup", num_samples, total_num_samples))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.calls.append(("start", trial.config["x"]))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append(("result", trial.config["x"], result["training_iteration"], result["trial_id"]))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.calls.append(("complete", trial.config["x"], trial.status))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.calls.append(("error", trial.config["x"], trial.status, trial.error_msg))

    def on_experiment_end(self, trials, **info):
        self.calls.append(("end", sorted(t.status for t in trials)))


def _slow(config):
    import time

    for i in range(3):
        if config["x"] == 2 and i == 1:
            raise ValueError("x=2 diverges")
        tune.report({"loss": config["x"] * (3 - i)})
        time.sleep(0.6)  # longer than the stream's quarter second: each result is its own change


@pytest.mark.timeout(300)
def test_hooks_follow_the_search(coordinator):
    recorder = Recorder()
    grid = Tuner(
        tune.with_resources(_slow, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(name="callbacks", callbacks=[recorder], verbose=0),
    ).fit()
    calls = recorder.calls
    assert calls[0] == ("setup", 1, 2) and calls[-1] == ("end", ["ERROR", "TERMINATED"])
    ok = [c for c in calls if c[0] != "setup" and c[0] != "end" and c[1] == 1]
    run_id = grid.trials[0].run_id
    assert ok == [("start", 1), *[("result", 1, i, run_id) for i in (1, 2, 3)], ("complete", 1, "TERMINATED")]
    failed = [c for c in calls if c[0] in ("start", "result", "error") and c[1] == 2]
    assert failed[0] == ("start", 2) and failed[1][:3] == ("result", 2, 1)
    assert failed[-1][:3] == ("error", 2, "ERROR") and "x=2 diverges" in failed[-1][3]


# Ray 2.60's get_dataframe() columns for this search, from a real Ray Tune run (``f`` reporting
# "loss" twice over a grid of x): pid, hostname and node_ip are left out (a trial is many processes).
RAY_COLUMNS = {
    "checkpoint_dir_name", "config/x", "date", "done", "hostname", "iterations_since_restore", "logdir", "loss",
    "node_ip", "pid", "time_since_restore", "time_this_iter_s", "time_total_s", "timestamp", "training_iteration",
    "trial_id",
}  # fmt: skip


@pytest.mark.timeout(300)
def test_the_dataframe_has_rays_columns(coordinator):
    def f(config):
        for i in range(2):
            tune.report({"loss": config["x"] + i})

    grid = Tuner(
        tune.with_resources(f, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([1, 2])},
        run_config=RunConfig(name="dataframe-columns", verbose=0),
    ).fit()
    df = grid.get_dataframe()
    assert RAY_COLUMNS - {"pid", "hostname", "node_ip"} <= set(df.columns), RAY_COLUMNS - set(df.columns)
    assert list(df["training_iteration"]) == [2, 2] and list(df["done"]) == [True, True]
    assert list(df["trial_id"]) == [t.run_id for t in grid.trials]
    assert (df["time_total_s"] >= df["time_this_iter_s"]).all() and (df["time_this_iter_s"] >= 0).all()
    assert all(len(d) == len("2026-01-01_00-00-00") for d in df["date"])
    # Each Result has them too, per report in its metrics_dataframe, as Ray's.
    result = grid[0]
    assert result.metrics["training_iteration"] == 2 and result.metrics["trial_id"] == grid.trials[0].run_id
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2]
