"""``tune.run``, ``run_experiments``, ``ExperimentAnalysis`` and the progress reporters, as Ray's."""

from __future__ import annotations

import inspect
import re

import pytest
import ray.tune

from trainwire import tune
from trainwire.tune.callback import Trial
from trainwire.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler
from trainwire.tune.search import BasicVariantGenerator
from trainwire.tune.search.optuna import OptunaSearch
from trainwire_core.errors import InvalidArgumentError


def quadratic(config):
    for i in range(2):
        tune.report({"loss": (config["x"] - 3) ** 2 + 1 - i, "step": i})


def diverges(config):
    tune.report({"loss": 1.0})
    if config["x"] == 2:
        raise ValueError("x=2 diverges")


def test_signatures_are_rays():
    for name in ("run", "run_experiments", "Experiment", "ExperimentAnalysis", "CLIReporter", "ResumeConfig"):
        ours = inspect.signature(getattr(tune, name)).parameters
        theirs = inspect.signature(getattr(ray.tune, name)).parameters
        assert list(ours)[: len(theirs)] == list(theirs), name


def test_arguments_trainwire_cannot_honour_are_refused_before_anything_starts():
    with pytest.raises(InvalidArgumentError) as err:
        tune.run(quadratic, storage_filesystem=object())
    assert err.value.field == "storage_filesystem"
    with pytest.raises(InvalidArgumentError) as err:
        tune.run(quadratic, restore="/tmp/checkpoint")
    assert err.value.field == "restore"
    with pytest.raises(DeprecationWarning, match="local_dir"):
        tune.run(quadratic, local_dir="/tmp")
    with pytest.raises(ValueError, match="max_failures must be 0"):
        tune.run(quadratic, fail_fast=True, max_failures=1)
    with pytest.raises(InvalidArgumentError) as err:  # finished trials are kept: a search is followed
        tune.ResumeConfig(finished=tune.ResumeConfig.ResumeType.RESTART)
    assert err.value.field == "resume_config.finished"
    # Failed trials go on or start again, as Tuner.restore's resume_errored / restart_errored.
    restart = tune.ResumeConfig(errored=tune.ResumeConfig.ResumeType.RESTART).request("search")
    assert restart.restart_errored and restart.resume_unfinished and not restart.resume_errored
    assert tune.ResumeConfig().request("search") is None
    with pytest.raises(InvalidArgumentError, match="register_trainable"):
        tune.run("never-registered")


def test_parts_by_rays_names():
    assert isinstance(tune.create_scheduler("fifo"), FIFOScheduler)
    asha = tune.create_scheduler("async_hyperband", max_t=9, grace_period=1)
    assert isinstance(asha, AsyncHyperBandScheduler)
    assert isinstance(tune.create_searcher("random"), BasicVariantGenerator)
    # Ray leaves out the keyword arguments a searcher does not take.
    assert isinstance(tune.create_searcher("optuna", metric="loss", mode="min", no_such_arg=1), OptunaSearch)
    with pytest.raises(ValueError, match="must be one of"):
        tune.create_scheduler("nope")
    with pytest.raises(ValueError, match="trainwire has no HyperOptSearch"):
        tune.create_searcher("hyperopt")


def test_cli_reporter_prints_rays_status_table(capsys):
    reporter = tune.CLIReporter(metric="loss", mode="min", max_report_frequency=0)
    reporter.setup(total_samples=3)
    trials = [
        Trial("run_a", 0, {"x": 1}, "TERMINATED", {"loss": 5.0, "training_iteration": 2, "time_total_s": 1.5}),
        Trial("run_b", 1, {"x": 3}, "RUNNING", {"loss": 1.0, "training_iteration": 1, "time_total_s": 0.5}),
        Trial("", 2, {"x": 2}, "ERROR", {}, error_msg="ValueError: x=2 diverges"),
    ]
    assert reporter.should_report(trials)
    reporter.report(trials, done=True)
    out = capsys.readouterr().out
    assert out.startswith("== Status ==\nCurrent time: ")
    assert "Current best trial: run_b with loss=1.0 and parameters={'x': 3}" in out
    assert "Number of trials: 3/3 (1 ERROR, 1 RUNNING, 1 TERMINATED)" in out
    header = next(line for line in out.splitlines() if line.startswith("| Trial name"))
    assert re.split(r"\s*\|\s*", header.strip("| ")) == [
        "Trial name",
        "status",
        "loc",
        "x",
        "iter",
        "total time (s)",
        "loss",
    ]
    assert re.search(r"\| run_b\s+\| RUNNING\s+\|\s+\|\s+3 \|\s+1 \|\s+0.5 \|\s+1 \|", out)
    assert "Number of errored trials: 1" in out and "x=2 diverges" in out


@pytest.mark.timeout(300)
def test_tune_run_over_a_function_returns_an_experiment_analysis(coordinator, capsys):
    tune.register_trainable("quadratic", quadratic)
    with pytest.warns(UserWarning, match="log_to_file, trial_dirname_creator have no effect"):
        analysis = tune.run(
            "quadratic",
            name="tune-run-fn",
            config={"x": tune.grid_search([1, 3])},
            metric="loss",
            mode="min",
            resources_per_trial=tune.PlacementGroupFactory([{"CPU": 0.5}]),
            progress_reporter=tune.CLIReporter(max_report_frequency=60),
            log_to_file=True,
            trial_dirname_creator=str,
        )
    out = capsys.readouterr().out
    assert "== Status ==" in out and "Number of trials: 2/2 (2 TERMINATED)" in out  # the final table
    assert [t.config for t in analysis.trials] == [{"x": 1}, {"x": 3}]
    # Last losses: x=1 -> 4, x=3 -> 0.
    assert analysis.best_config == {"x": 3} and analysis.best_trial is analysis.trials[1]
    assert analysis.best_result["loss"] == 0 and analysis.best_result["training_iteration"] == 2
    assert analysis.get_best_trial("loss", "min", scope="all") is analysis.trials[1]
    assert analysis.get_all_configs(prefix=True)[str(analysis.trials[0])] == {"config/x": 1}
    assert list(analysis.results_df["loss"]) == [4, 0] and list(analysis.results_df.index) == [
        t.trial_id for t in analysis.trials
    ]
    assert list(analysis.dataframe(metric="loss", mode="max")["loss"]) == [5, 1]  # each trial's worst report
    assert [list(df["step"]) for df in analysis.trial_dataframes.values()] == [[0, 1], [0, 1]]
    assert analysis.trials[0].metric_analysis["loss"] == {
        "max": 5, "min": 4, "avg": 4.5, "last": 4, "last-5-avg": 4.5, "last-10-avg": 4.5
    }  # fmt: skip
    # The same search, read again from the coordinator by its id.
    again = tune.ExperimentAnalysis(analysis.experiment_path)
    assert again.best_config == {"x": 3} and again.default_metric == "loss"
    # resume follows the search of that name instead of starting another.
    resumed = tune.run(quadratic, name="tune-run-fn", resume="AUTO", metric="loss", mode="min", verbose=0)
    assert resumed.experiment_path == analysis.experiment_path


@pytest.mark.timeout(300)
def test_run_experiments_raises_for_a_failed_trial(coordinator):
    spec = {
        "failing": {"run": diverges, "config": {"x": tune.grid_search([1, 2])}, "resources_per_trial": {"cpu": 0.5}}
    }
    with pytest.raises(tune.TuneError, match="Trials did not complete") as err:
        tune.run_experiments(spec, verbose=0)
    (failed,) = err.value.args[1]
    assert failed.status == "ERROR" and failed.config == {"x": 2} and "x=2 diverges" in failed.error_msg
    trials = tune.run_experiments(spec, verbose=0, raise_on_failed_trial=False)
    assert sorted(t.status for t in trials) == ["ERROR", "TERMINATED"]
