"""Population Based Training through a real search: exploit copies the better trial's checkpoint, explore
perturbs its config.

Two function trainables (lr 0.1 and 1.0) count in their checkpoints; every 2 iterations PBT
compares them and the worse one stops and goes on, in a new run, from the better one's committed
checkpoint with the better one's lr times 1.2 or 0.8 (resample_probability=0: always perturbed).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from urllib.parse import urlparse

import pytest

from trainwire import RunConfig, tune
from trainwire.tune import Checkpoint, TuneConfig, Tuner
from trainwire.tune.schedulers import PopulationBasedTraining
from trainwire_core.structs import struct_to_dict

pytestmark = pytest.mark.timeout(300)
ITERATIONS = 12


def _counting(config):
    counter, started_from, source_lr = 0, 0, None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            state = json.load(f)
        counter = started_from = state["counter"]
        source_lr = state["lr"]
    for _ in range(ITERATIONS):
        counter += 1
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"counter": counter, "lr": config["lr"]}, f)
            metrics = {"score": config["lr"] * counter, "counter": counter, "lr": config["lr"]}
            metrics.update(started_from=started_from, source_lr=source_lr or 0.0)
            tune.report(metrics, checkpoint=Checkpoint.from_directory(d))
        time.sleep(0.5)  # the two trials report side by side


def test_pbt_restarts_the_worse_trial_from_the_better_ones_checkpoint_with_a_perturbed_config(coordinator):
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"lr": tune.uniform(0.01, 2.0)},
        quantile_fraction=0.5,
        resample_probability=0.0,
    )
    grid = Tuner(
        tune.with_resources(_counting, {"cpu": 0.5}),
        param_space={"lr": tune.grid_search([0.1, 1.0])},
        tune_config=TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=RunConfig(name="pbt-lineage", verbose=0),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == 2

    tune_run = grid.tune_run  # the search's record, as the coordinator kept it
    exploited = [t for t in tune_run.trials if t.past_run_ids]
    assert exploited, "the worse trial was exploited at least once"
    trial = exploited[0]
    other = tune_run.trials[1 - trial.index]
    # Lineage: the trial's run started from a checkpoint the other trial committed ...
    assert trial.resume_from_checkpoint
    other_runs = {other.run_id, *other.past_run_ids}
    assert any(run_id in trial.resume_from_checkpoint for run_id in other_runs)
    with open(os.path.join(urlparse(trial.resume_from_checkpoint).path, "state.json")) as f:
        copied = json.load(f)
    result = next(r for r in grid if r.metrics["started_from"] == copied["counter"])
    # ... and counted on from it: iterations too go on from the clone's.
    assert result.metrics["counter"] == copied["counter"] + ITERATIONS
    last = struct_to_dict(trial.last_result)
    assert last["counter"] == last["training_iteration"] == copied["counter"] + ITERATIONS
    # Explore: the clone's lr times one of the perturbation factors, in the config and in the reports.
    assert result.metrics["source_lr"] == pytest.approx(copied["lr"])
    assert result.config["lr"] in (pytest.approx(copied["lr"] * 1.2), pytest.approx(copied["lr"] * 0.8))
    assert result.metrics["lr"] == pytest.approx(result.config["lr"])
