"""Ray Train V2's loop API (``trainwire.train`` as ``ray.train`` since Ray 2.51).

report's upload modes (SYNC, ASYNC, NO_UPLOAD, checkpoint_upload_fn), commits in report order
(across a worker SIGKILL too), get_all_reported_checkpoints on the workers, asynchronous
validation feeding best_checkpoints, UserCallback, V2 configs and local mode (num_workers=0).
"""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

from trainwire import TrainingFailedError, train
from trainwire.data_parallel import DataParallelTrainer
from trainwire.train import (
    Checkpoint,
    CheckpointConfig,
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    UserCallback,
    ValidationConfig,
    ValidationTaskConfig,
)
from trainwire.train.session import check_report_arguments
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(240)


def _write(d: str, step: int, size: int = 0) -> None:
    with open(os.path.join(d, "step"), "w") as f:
        f.write(str(step))
    if size:
        with open(os.path.join(d, "blob"), "wb") as f:
            f.write(os.urandom(size))


def _step_of(checkpoint) -> int:
    with checkpoint.as_directory() as d:
        return int(open(os.path.join(d, "step")).read())


def mixed_modes_loop(config):
    ctx = train.get_context()
    seen = {
        "rank": ctx.get_world_rank(),
        "world": ctx.get_world_size(),
        "local": ctx.get_local_rank(),
        "node": ctx.get_node_rank(),
        "name": ctx.get_experiment_name(),
    }
    storage = ctx.get_storage()
    modes = [CheckpointUploadMode.ASYNC, CheckpointUploadMode.SYNC, CheckpointUploadMode.ASYNC]
    for step, mode in enumerate(modes):
        # ASYNC from a TemporaryDirectory: the directory is gone before the upload runs.
        with tempfile.TemporaryDirectory() as d:
            _write(d, step, size=200_000)
            train.report({"step": step, **seen}, checkpoint=Checkpoint.from_directory(d), checkpoint_upload_mode=mode)
    # NO_UPLOAD: rank 0 writes straight into the run's storage, where the checkpoint is committed.
    if ctx.get_world_rank() == 0:
        import pyarrow.fs as pafs

        uri = storage.build_checkpoint_path_from_name("written_in_place")
        fs, path = pafs.FileSystem.from_uri(uri)
        fs.create_dir(path)
        with fs.open_output_stream(f"{path}/step") as f:
            f.write(b"3")
        train.report(
            {"step": 3, **seen},
            checkpoint=Checkpoint.from_uri(uri),
            checkpoint_dir_name="written_in_place",
            checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
        )
    else:
        train.report({"step": 3, **seen})

    # checkpoint_upload_fn persists it itself (here: a copy into the run's storage).
    def upload(checkpoint, dir_name):
        target = storage.build_checkpoint_path_from_name(dir_name)
        return Checkpoint.from_uri(checkpoint.to_uri(target))

    with tempfile.TemporaryDirectory() as d:
        _write(d, 4)
        train.report(
            {"step": 4, **seen},
            checkpoint=Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None,
            checkpoint_upload_fn=upload,
        )
    reported = train.get_all_reported_checkpoints(consistency_mode=CheckpointConsistencyMode.COMMITTED)
    steps = [r.metrics["step"] for r in reported]
    read_back = [_step_of(r.checkpoint) for r in reported]
    train.report({"step": 5, "reported_steps": steps, "read_back": read_back, **seen})


class Recorder(UserCallback):
    def __init__(self) -> None:
        self.reports: list[tuple[float, bool]] = []
        self.exceptions: list[dict] = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((metrics[0]["step"], checkpoint is not None))

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append({rank: str(exc) for rank, exc in worker_exceptions.items()})


def test_upload_modes_commit_in_report_order_and_read_back_on_the_workers(coordinator, client):
    recorder = Recorder()
    result = DataParallelTrainer(
        mixed_modes_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="v2-modes", verbose=0, callbacks=[recorder]),
    ).fit()
    assert result.metrics["reported_steps"] == [0, 1, 2, 3, 4]
    assert result.metrics["read_back"] == [0, 1, 2, 3, 4]
    assert result.metrics["world"] == 2 and result.metrics["name"] == "v2-modes"
    events = [e.checkpoint for e in client.watch_run(result.run_id) if e.HasField("checkpoint")]
    assert [e.index for e in events] == sorted(e.index for e in events)
    assert [e.checkpoint_id for e in events][3:] == ["written_in_place", "checkpoint_000005"]
    assert [_step_of(c) for c, _ in sorted(result.best_checkpoints, key=lambda p: p[1]["step"])] == [0, 1, 2, 3, 4]
    assert recorder.reports == [(0, True), (1, True), (2, True), (3, True), (4, True), (5, False)]


def no_upload_outside_loop(config):
    with tempfile.TemporaryDirectory() as d:
        _write(d, 0)
        train.report({"step": 0}, checkpoint=Checkpoint.from_directory(d), checkpoint_upload_mode="NO_UPLOAD")


def test_no_upload_of_a_checkpoint_outside_the_runs_storage_is_refused(coordinator):
    recorder = Recorder()
    with pytest.raises(TrainingFailedError) as info:
        DataParallelTrainer(
            no_upload_outside_loop,
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(verbose=0, callbacks=[recorder]),
        ).fit()
    assert info.value.result.error.exc_type == "InvalidArgumentError"
    assert "must already be in the run's storage" in info.value.result.error.message
    assert recorder.exceptions and "run's storage" in recorder.exceptions[0][0]


def async_then_killed_loop(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        start = _step_of(checkpoint) + 1
    for step in range(start, 6):
        d = tempfile.mkdtemp()
        _write(d, step, size=500_000)
        train.report(
            {"step": step, "attempt_resumed": checkpoint is not None},
            checkpoint=Checkpoint.from_directory(d),
            checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
        )
        if step == 3 and checkpoint is None and train.get_context().get_world_rank() == 1:
            # Uploads may still be under way: they are lost, and nothing after them commits first.
            os.kill(os.getpid(), signal.SIGKILL)


def test_async_commits_stay_in_order_across_a_worker_sigkill(coordinator, client):
    result = DataParallelTrainer(
        async_then_killed_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert result.metrics["step"] == 5 and result.metrics["attempt_resumed"] is True
    assert client.get_run(result.run_id).num_failures == 1
    events = [e.checkpoint for e in client.watch_run(result.run_id) if e.HasField("checkpoint")]
    indices = [e.index for e in events]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)
    steps = [e.metrics["step"] for e in events]
    assert steps == sorted(steps) and steps[-1] == 5
    assert _step_of(result.checkpoint) == 5


def validated_loop(config):
    for step in range(4):
        with tempfile.TemporaryDirectory() as d:
            _write(d, step)
            train.report(
                {"step": step, "score": 0.0},
                checkpoint=Checkpoint.from_directory(d),
                checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
                validation=ValidationTaskConfig(fn_kwargs={"best": 2}) if step != 3 else True,
            )
    reported = train.get_all_reported_checkpoints(consistency_mode=CheckpointConsistencyMode.VALIDATED)
    train.report({"step": 4, "validated": [r.metrics.get("score") for r in reported]})


def validate(checkpoint, best=1):
    # Scores peak at step == best: the best checkpoint is the one validation says is best.
    step = _step_of(checkpoint)
    return {"score": -abs(step - best), "validated_step": step}


def test_validation_metrics_join_the_checkpoints_and_rank_them(coordinator):
    result = DataParallelTrainer(
        validated_loop,
        scaling_config=ScalingConfig(num_workers=2),
        validation_config=ValidationConfig(validate),
        run_config=RunConfig(
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_score_attribute="score", checkpoint_score_order="max"),
        ),
    ).fit()
    # fn_kwargs of the report win over the defaults (best=1) for steps 0-2; step 3 uses the default.
    assert result.metrics["validated"] == [-2, -1, 0, -2]
    best, metrics = result.best_checkpoints[0]
    assert _step_of(best) == 2 and metrics["validated_step"] == 2 and metrics["score"] == 0


def local_loop(config):
    ctx = train.get_context()
    assert ctx.get_world_size() == 1 and ctx.get_world_rank() == 0
    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as d:
            _write(d, step)
            train.report(
                {"loss": 1.0 / (step + 1)},
                checkpoint=Checkpoint.from_directory(d),
                checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
                validation=True,
            )
    assert len(train.get_all_reported_checkpoints()) == config["steps"]
    return "local done"


def test_local_mode_runs_the_loop_in_this_process_without_a_coordinator(tmp_path, monkeypatch):
    import trainwire.session_client as session_client

    def no_client():
        raise AssertionError("local mode must not reach a coordinator")

    monkeypatch.setattr(session_client, "get_client", no_client)
    recorder = Recorder()

    class StepRecorder(Recorder):
        def after_report(self, run_context, metrics, checkpoint):
            self.reports.append((metrics[0]["loss"], checkpoint is not None))

    recorder = StepRecorder()
    result = DataParallelTrainer(
        local_loop,
        train_loop_config={"steps": 3},
        scaling_config=ScalingConfig(num_workers=0),
        validation_config=ValidationConfig(lambda c: {"val": _step_of(c)}),
        run_config=RunConfig(
            name="local",
            storage_path=str(tmp_path),
            callbacks=[recorder],
            checkpoint_config=CheckpointConfig(checkpoint_score_attribute="val"),
        ),
    ).fit()
    assert result.state == "SUCCEEDED" and result.metrics == {"loss": pytest.approx(1 / 3), "val": 2}
    assert _step_of(result.checkpoint) == 2 and result.path == str(tmp_path / "local")
    assert list(result.metrics_dataframe["val"]) == [0, 1, 2]
    assert [m["val"] for _, m in result.best_checkpoints] == [2, 1, 0]
    assert [c for _, c in recorder.reports] == [True, True, True]
    assert result.return_value == "local done"


def test_v2_configs():
    scaling = ScalingConfig(num_workers=2, use_gpu=True, accelerator_type="A100", placement_strategy="SPREAD")
    assert scaling.worker_resources == {"CPU": 1.0, "GPU": 1.0, "accelerator_type:A100": 0.001}
    assert scaling.to_proto().resources_per_worker["accelerator_type:A100"] == pytest.approx(0.001)
    with pytest.raises(InvalidArgumentError) as info:
        ScalingConfig(accelerator_type="A 100")
    assert info.value.field == "scaling_config.accelerator_type"
    with pytest.raises(InvalidArgumentError):
        ScalingConfig(num_workers=0).to_proto()  # local mode never reaches a coordinator
    with pytest.raises(InvalidArgumentError):
        ScalingConfig(num_workers=-1)
    run = RunConfig(storage_path="/tmp/results", name="v2")
    assert run.to_proto().storage_path == "/tmp/results"
    # As Ray: an ASYNC upload owns (deletes) the directory it was given, unless told otherwise.
    assert check_report_arguments({}, None, None, "ASYNC", None, False, None) == (CheckpointUploadMode.ASYNC, True)
    assert check_report_arguments({}, None, None, "SYNC", None, False, None) == (CheckpointUploadMode.SYNC, False)
    assert check_report_arguments({}, None, None, "ASYNC", False, False, None)[1] is False
    assert train.get_all_reported_checkpoints.__name__ == "get_all_reported_checkpoints"
