"""Search domains in a ScalingConfig, resolved per trial by the coordinator (as Ray's Tuner does)."""

from __future__ import annotations

import pytest

from trainwire import DataParallelTrainer, RunConfig, ScalingConfig, train, tune
from trainwire.tune import TuneConfig, Tuner

pytestmark = pytest.mark.timeout(300)


def _world(config):
    train.report({"world_size": train.get_context().get_world_size(), "score": config.get("x", 0)})


def test_a_grid_over_num_workers_runs_each_trial_with_its_own_group(coordinator):
    trainer = DataParallelTrainer(_world, train_loop_config={"x": 1}, scaling_config=ScalingConfig(num_workers=1))
    grid = Tuner(
        trainer,
        param_space={
            "scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2]), resources_per_worker={"CPU": 0.5})
        },
        tune_config=TuneConfig(metric="score", mode="max"),
        run_config=RunConfig(name="scaling-grid", verbose=0),
    ).fit()
    assert grid.num_errors == 0
    assert sorted(r.metrics["world_size"] for r in grid) == [1, 2]
    df = grid.get_dataframe()
    assert sorted(df["config/scaling_config/num_workers"]) == [1, 2]
