"""``tune.Trainable``: Ray's class API, run as a trial's loop (local mode here, a real search below)."""

from __future__ import annotations

import inspect
import os

import pytest
import ray.tune

from trainwire import CheckpointConfig, RunConfig, ScalingConfig, tune
from trainwire.tune.class_trainable import Trainable
from trainwire.tune.trainable import as_trainer


class Counter(tune.Trainable):
    """Adds config["step"] each iteration; its state is the running total (saved as a dict)."""

    def setup(self, config):
        self.total = 0.0
        self.step_size = config["step"]
        self.fail_marker = config.get("fail_marker")

    def step(self):
        if self.fail_marker and self.iteration == 2 and not os.path.exists(self.fail_marker):
            open(self.fail_marker, "w").close()  # fails once, at its third iteration
            raise RuntimeError("first attempt dies at iteration 3")
        self.total += self.step_size
        return {"total": self.total, "loss": abs(10 - self.total)}

    def save_checkpoint(self, checkpoint_dir):
        return {"total": self.total}

    def load_checkpoint(self, checkpoint):
        self.total = checkpoint["total"]


class FileCounter(Counter):
    """The same, saved as a file in the checkpoint's directory."""

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "total.txt"), "w") as f:
            f.write(str(self.total))

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "total.txt")) as f:
            self.total = float(f.read())


def test_trainable_has_rays_methods_and_signatures():
    for name, member in vars(ray.tune.Trainable).items():
        private = name.startswith("_") and name not in ("_export_model", "_implements_method")
        if private or not callable(member) and not isinstance(member, property | classmethod):
            continue
        assert hasattr(Trainable, name), name
        if callable(member) and not isinstance(member, property):
            ours = list(inspect.signature(getattr(Trainable, name)).parameters)
            theirs = list(inspect.signature(getattr(ray.tune.Trainable, name)).parameters)
            assert ours[: len(theirs)] == theirs, name


@pytest.mark.parametrize("cls", [Counter, FileCounter])
def test_train_save_and_restore_carry_the_iteration_and_state(cls, tmp_path):
    t = cls({"step": 2})
    results = [t.train() for _ in range(3)]
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert results[-1]["total"] == 6 and results[-1]["done"] is False and results[-1]["time_total_s"] >= 0
    assert t.iteration == t.training_iteration == 3 and t.trial_id == "default"
    checkpoint = t.save(str(tmp_path / "ckpt"))
    other = cls({"step": 2})
    other.restore(checkpoint)
    assert other.iteration == 3 and other.total == 6
    assert other.train()["training_iteration"] == 4 and other.total == 8
    assert other.train()["iterations_since_restore"] == 2


def _local_run(cls, run_config, tmp_path, checkpoint=None, **config):
    trainer = as_trainer(cls, run_config)
    trainer.scaling_config = ScalingConfig(num_workers=0)  # local mode: the loop runs in this process
    trainer.train_loop_config = config
    trainer.run_config = RunConfig(storage_path=str(tmp_path), name="local")
    trainer.resume_from_checkpoint = checkpoint
    return trainer.fit()


def test_the_trial_loop_checkpoints_by_frequency_and_ends_at_the_stop_dict(tmp_path):
    stop_at_4 = RunConfig(stop={"training_iteration": 4}, checkpoint_config=CheckpointConfig(checkpoint_frequency=3))
    result = _local_run(Counter, stop_at_4, tmp_path, step=1.0)
    assert list(result.metrics_dataframe["training_iteration"]) == [1, 2, 3, 4]
    # Every third iteration, and at the end (checkpoint_at_end): iterations 3 and 4.
    assert result.checkpoint is not None and result.metrics["total"] == 4
    later = Counter({"step": 1.0})
    later.restore(result.checkpoint)
    assert later.iteration == 4 and later.total == 4


def test_a_restarted_trial_carries_on_from_its_checkpoint(tmp_path):
    first = _local_run(
        FileCounter,
        RunConfig(stop={"training_iteration": 2}, checkpoint_config=CheckpointConfig(checkpoint_at_end=True)),
        tmp_path,
        step=1.0,
    )
    resumed = _local_run(
        FileCounter, RunConfig(stop={"training_iteration": 5}), tmp_path, checkpoint=first.checkpoint, step=1.0
    )
    frame = resumed.metrics_dataframe
    assert list(frame["training_iteration"]) == [3, 4, 5]
    assert list(frame["total"]) == [3, 4, 5] and list(frame["iterations_since_restore"]) == [1, 2, 3]


class Done(tune.Trainable):
    def setup(self, config):
        self.n = 0

    def step(self):
        self.n += 1
        return {"n": self.n, "done": self.n == 2}


def test_a_done_result_ends_the_trial_without_a_stop(tmp_path):
    result = _local_run(Done, RunConfig(checkpoint_config=CheckpointConfig(checkpoint_at_end=False)), tmp_path)
    assert list(result.metrics_dataframe["n"]) == [1, 2] and result.checkpoint is None


def test_with_parameters_passes_objects_to_setup(tmp_path):
    class Scaled(tune.Trainable):
        def setup(self, config, factor):
            self.value = config["x"] * factor

        def step(self):
            return {"value": self.value, "done": True}

    wrapped = tune.with_parameters(Scaled, factor=10)
    result = _local_run(wrapped, RunConfig(checkpoint_config=CheckpointConfig(checkpoint_at_end=False)), tmp_path, x=3)
    assert result.metrics["value"] == 30


def test_resources_take_rays_forms():
    pgf = tune.PlacementGroupFactory([{"CPU": 1, "GPU": 0}, {"CPU": 2}])
    assert pgf.bundles == [{"CPU": 1.0}, {"CPU": 2.0}] and pgf.required_resources == {"CPU": 3.0}
    with pytest.warns(UserWarning, match="sum of the 2 bundles"):
        summed = tune.with_resources(Counter, pgf)
    assert summed.resources == {"CPU": 3.0}
    assert tune.with_resources(Counter, {"cpu": 2, "custom_resources": {"tpu": 1}}).resources == {"CPU": 2, "tpu": 1}
    with pytest.raises(ValueError, match="zero bundles"):
        tune.PlacementGroupFactory([])


# --- a real search -------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_tune_run_over_a_class_restores_a_failed_trial_and_picks_the_best(coordinator, tmp_path):
    marker = str(tmp_path / "failed-once")
    analysis = tune.run(
        FileCounter,
        name="class-api",
        config={"step": tune.grid_search([2.0, 5.0]), "fail_marker": marker},
        stop={"training_iteration": 4},
        metric="loss",
        mode="min",
        checkpoint_config=CheckpointConfig(checkpoint_frequency=2),
        max_failures=1,
        resources_per_trial={"cpu": 0.5},
        verbose=0,
    )
    assert [t.status for t in analysis.trials] == ["TERMINATED", "TERMINATED"]
    frames = analysis.trial_dataframes
    for trial in analysis.trials:
        # The first attempt of the first trial to start died at iteration 3: the restart
        # restored iteration 2's checkpoint, so iterations and totals carry on.
        frame = frames[str(trial)]
        assert list(frame["training_iteration"])[-2:] == [3, 4]
        assert trial.last_result["total"] == 4 * trial.config["step"]
    assert os.path.exists(marker)
    # totals 8 (loss 2) and 20 (loss 10): step 2 is best.
    assert analysis.best_config == {"step": 2.0, "fail_marker": marker}
    assert analysis.best_trial is analysis.get_best_trial("loss", "min")
    assert analysis.best_result["loss"] == 2
    assert analysis.get_best_config("total", "max")["step"] == 5.0
    best = analysis.best_checkpoint
    assert best is not None
    with best.as_directory() as d, open(os.path.join(d, "total.txt")) as f:
        assert float(f.read()) in (4.0, 8.0)  # the checkpoints kept at iterations 2 and 4
