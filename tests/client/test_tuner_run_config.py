"""A Tuner honours its RunConfig's progress_reporter and log_to_file, as Ray's."""

from __future__ import annotations

import os

import pytest

from trainwire import tune
from trainwire.tune import RunConfig, TuneConfig, Tuner
from trainwire_core.storage import resolve

pytestmark = pytest.mark.timeout(300)


def quadratic(config):
    print(f"x is {config['x']}", flush=True)
    tune.report({"loss": (config["x"] - 3) ** 2})


def test_run_configs_progress_reporter_prints_its_table_and_log_to_file_writes_each_trials(coordinator, capsys):
    grid = Tuner(
        quadratic,
        param_space={"x": tune.grid_search([1, 3])},
        tune_config=TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(progress_reporter=tune.CLIReporter(max_report_frequency=60), log_to_file="all.log"),
    ).fit()
    out = capsys.readouterr().out
    assert "== Status ==" in out and "Number of trials: 2/2 (2 TERMINATED)" in out
    for result in grid:
        fs, root = resolve(result.path)
        with fs.open_input_stream(os.path.join(root, "all.log")) as f:
            assert f"x is {result.config['x']}" in f.read().decode()
