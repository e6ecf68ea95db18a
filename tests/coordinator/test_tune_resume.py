"""Tuner.restore's modes, as Ray's: a trial that failed once goes on from its checkpoint or starts again.

Two function trainables count in their checkpoints; the one with ``x == 2`` raises once, after
its second checkpoint, so the search ends with one failed trial. ``Tuner.restore(...,
resume_errored=True)`` runs that trial again from its checkpoint at training_iteration 2 (its
iterations count on to 4); ``restart_errored=True`` runs it from the start.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import pytest

from trainwire import RunConfig, tune
from trainwire.tune import Checkpoint, TuneConfig, Tuner
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(300)
STEPS = 4


def _flaky(config):
    counter = started_from = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            counter = started_from = json.load(f)["counter"]
    while counter < STEPS:
        counter += 1
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"counter": counter}, f)
            tune.report({"counter": counter, "started_from": started_from}, checkpoint=Checkpoint.from_directory(d))
        if config["x"] == 2 and counter == 2 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()  # fails once: the next run of it goes on
            raise RuntimeError("a flaky trial")


def _search(name: str, marker: str):
    tuner = Tuner(
        tune.with_resources(_flaky, {"cpu": 0.5}),
        param_space={"x": tune.grid_search([1, 2]), "marker": marker},
        tune_config=TuneConfig(metric="counter", mode="max"),
        run_config=RunConfig(name=name, verbose=0),
    )
    grid = tuner.fit()
    assert grid.num_errors == 1 and len(grid) == 2
    return grid


def _flaky_trial(grid):
    return next(t for t in grid.tune_run.trials if struct_to_dict(t.config)["train_loop_config"]["x"] == 2)


@pytest.mark.parametrize("restart", [False, True])
def test_a_failed_trial_is_resumed_from_its_checkpoint_or_restarted(coordinator, tmp_path, restart):
    name = f"flaky-{'restart' if restart else 'resume'}"
    grid = _search(name, str(tmp_path / "failed-once"))
    failed = _flaky_trial(grid)
    assert failed.state == common_pb2.FAILED
    # Ray's defaults follow the search as it is: the failed trial stays failed.
    assert Tuner.restore(grid.tune_run.tune_id, trainable=_flaky).fit().num_errors == 1

    options = {"restart_errored": True} if restart else {"resume_errored": True}
    restored = Tuner.restore(grid.tune_run.tune_id, trainable=_flaky, **options).fit()
    assert restored.num_errors == 0 and len(restored) == 2
    trial = _flaky_trial(restored)
    assert trial.state == common_pb2.SUCCEEDED and trial.past_run_ids == [failed.run_id]
    result = next(r for r in restored if r.config["x"] == 2)
    # Resumed: from its checkpoint at training_iteration 2, counting on; restarted: from nothing.
    assert result.metrics["started_from"] == (0 if restart else 2)
    assert result.metrics["counter"] == STEPS
    assert int(result.metrics["training_iteration"]) == STEPS
    assert bool(trial.resume_from_checkpoint) is not restart
    # The trial that had finished was not run again.
    other = next(t for t in restored.tune_run.trials if t.index != trial.index)
    assert not other.past_run_ids


def test_restore_modes_are_checked():
    with pytest.raises(Exception, match="resume_errored must be a bool"):
        Tuner.restore("some-search", resume_errored="yes")


def _slow(config):
    import time

    for i in range(600):
        tune.report({"i": i + 1})
        time.sleep(0.1)


def test_resume_unfinished_false_stops_a_running_searchs_trials_as_finished(coordinator, client):
    import threading

    tuner = Tuner(
        tune.with_resources(_slow, {"cpu": 0.25}),
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=TuneConfig(metric="i", mode="max"),
        run_config=RunConfig(name="slow-unfinished", verbose=0),
    )
    thread = threading.Thread(target=tuner.fit, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            running = client.get_tune("slow-unfinished")
        except Exception:  # not recorded yet
            running = None
        if running is not None and any(t.num_reports for t in running.trials):
            break
        time.sleep(0.5)
    restored = Tuner.restore("slow-unfinished", trainable=_slow, resume_unfinished=False).fit()
    # As Ray marks them TERMINATED: the trials stopped as finished, long before their 600 reports.
    assert restored.num_errors == 0 and len(restored) == 2
    assert {t.state for t in restored.tune_run.trials} == {common_pb2.SUCCEEDED}
    assert all(r.metrics.get("i", 0) < 600 for r in restored)
    assert restored.tune_run.state == common_pb2.SUCCEEDED
    thread.join(60)
