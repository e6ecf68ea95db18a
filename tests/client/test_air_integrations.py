"""The SDK's experiment trackers on a real fit, each read back from what it wrote.

MLflow: a real ``mlflow server`` (tests/mlflow_server.py), read through ``MlflowClient``.
W&B: offline mode, its run file (``run-<id>.wandb``) parsed record by record.
TensorBoard: tensorboardX's event files, read with TensorFlow's ``summary_iterator``.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import pathlib
import struct

import pytest
from mlflow_server import mlflow_uri  # noqa: F401 - the fixture

from trainwire import CheckpointConfig, RunConfig, ScalingConfig
from trainwire.air.integrations.mlflow import MLflowLoggerCallback
from trainwire.air.integrations.tensorboard import TBXLoggerCallback
from trainwire.air.integrations.wandb import WandbLoggerCallback
from trainwire.data_parallel import DataParallelTrainer

pytestmark = pytest.mark.timeout(300)

LOSSES = [0.9, 0.3, 0.6, 0.7]  # the best checkpoint (min loss) is step 1's, the latest step 3's
STEPS = [1, 2, 3, 4]  # one per report (no training_iteration): the report's 1-based index
EXPERIMENT = "trainwire-sdk-trackers"
CONFIG = {"losses": LOSSES, "lr": 0.01, "optimizer": {"name": "sgd", "momentum": 0.9}}


def _loop(config):
    import tempfile

    from trainwire import train
    from trainwire.train import Checkpoint

    rank = train.get_context().get_world_rank()
    for step, loss in enumerate(config["losses"]):
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if rank == 0:
                with open(os.path.join(d, "state.txt"), "w") as f:
                    f.write(f"step {step}")
                checkpoint = Checkpoint.from_directory(d)
            metrics = {"loss": loss, "acc": 1.0 - loss, "extra": {"lr": config["lr"] * (step + 1)}, "phase": "train"}
            train.report(metrics, checkpoint=checkpoint)


@pytest.fixture(scope="module")
def tracked(coordinator, mlflow_uri, tmp_path_factory):  # noqa: F811 - mlflow_uri is the fixture
    """One fit with all three trackers, from a directory that no service runs in."""
    cwd = tmp_path_factory.mktemp("cwd")
    wandb_dir = tmp_path_factory.mktemp("wandb")
    tb_dir = tmp_path_factory.mktemp("tensorboard")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "WANDB_API_KEY"):
            mp.delenv(var, raising=False)
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_DIR", str(wandb_dir))
        mp.setenv("WANDB_SILENT", "true")
        # MLflow's system-metrics monitor samples every half second (default 10 s): the fit lasts longer.
        mp.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.5")
        result = DataParallelTrainer(
            _loop,
            train_loop_config=CONFIG,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(
                name="trackers",
                verbose=0,
                checkpoint_config=CheckpointConfig(
                    num_to_keep=1, checkpoint_score_attribute="loss", checkpoint_score_order="min"
                ),
                callbacks=[
                    MLflowLoggerCallback(
                        mlflow_uri,
                        experiment_name=EXPERIMENT,
                        tags={"team": "ml"},
                        save_artifact=True,
                        log_system_metrics=True,
                    ),
                    WandbLoggerCallback(project="trainwire-tests", upload_checkpoints=True),
                    TBXLoggerCallback(tb_dir),
                ],
            ),
        ).fit()
    return {"result": result, "cwd": cwd, "wandb_dir": wandb_dir, "tb_dir": tb_dir, "mlflow_uri": mlflow_uri}


def test_the_fit_ran_as_the_trackers_expect(tracked):
    result = tracked["result"]
    assert result.state == "SUCCEEDED"
    assert [m["loss"] for _, m in result.best_checkpoints][0] == 0.3
    # Nothing was written where the program runs (no ./mlruns, ./wandb, ./runs).
    assert os.listdir(tracked["cwd"]) == []


# --- MLflow ---------------------------------------------------------------------------------
def test_mlflow_has_the_run_its_params_every_step_the_best_checkpoint_and_its_status(tracked, tmp_path):
    from mlflow import MlflowClient

    result = tracked["result"]
    client = MlflowClient(tracked["mlflow_uri"])
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id], f"tags.`trainwire.run_id` = '{result.run_id}'")
    assert run.info.run_name == "trackers"
    assert run.info.status == "FINISHED"
    assert run.info.end_time is not None and run.info.end_time >= run.info.start_time
    assert run.data.tags["team"] == "ml"
    assert run.data.params == {
        "losses": str(LOSSES),
        "lr": "0.01",
        "optimizer/name": "sgd",
        "optimizer/momentum": "0.9",
        "num_workers": "2",
    }
    # Numbers only (the "phase" string is not a metric), nested ones flattened; system/ are MLflow's own.
    assert {k for k in run.data.metrics if not k.startswith("system/")} == {"loss", "acc", "extra/lr"}
    expected = {
        "loss": LOSSES,
        "acc": [1.0 - x for x in LOSSES],
        "extra/lr": [0.01 * (i + 1) for i in range(len(LOSSES))],
    }
    for key, values in expected.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert [s for s, _ in history] == STEPS, key
        assert [v for _, v in history] == pytest.approx(values), key
    # The best checkpoint (loss 0.3, step 1), not the latest, is the model artifact, files and all.
    names = sorted(f.path for f in client.list_artifacts(run.info.run_id, "checkpoint"))
    assert "checkpoint/state.txt" in names
    local = client.download_artifacts(run.info.run_id, "checkpoint", str(tmp_path))
    assert pathlib.Path(local, "state.txt").read_text() == "step 1"


def test_mlflow_has_system_metrics_while_the_run_lasted(tracked):
    from mlflow import MlflowClient

    result = tracked["result"]
    client = MlflowClient(tracked["mlflow_uri"])
    experiment = client.get_experiment_by_name(EXPERIMENT)
    (run,) = client.search_runs([experiment.experiment_id], f"tags.`trainwire.run_id` = '{result.run_id}'")
    system = {k for k in run.data.metrics if k.startswith("system/")}
    # MLflow's monitor (psutil): CPU and memory at least, each sampled at steps 0, 1, ...
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= system, system
    cpu = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
    assert cpu and all(0 <= m.value <= 100 * os.cpu_count() for m in cpu)
    assert sorted(m.step for m in cpu) == list(range(len(cpu)))
    # Sampled while the run lasted: none after MLflow marked it ended.
    assert all(run.info.start_time <= m.timestamp <= run.info.end_time for m in cpu)
    memory = client.get_metric_history(run.info.run_id, "system/system_memory_usage_megabytes")
    assert all(m.value > 0 for m in memory)


# --- W&B ----------------------------------------------------------------------------------
def _wandb_records(path: str):
    """The records of a W&B run file: LevelDB's log format (32 KiB blocks) after a ``:W&B`` header."""
    from wandb.proto import wandb_internal_pb2

    data = pathlib.Path(path).read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1)
    block, header = 32768, 7
    pos, pending = header, b""
    while pos + header <= len(data):
        left = block - pos % block
        if left < header:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        if kind == 0:  # zero padding to the block's end
            pos += left
            continue
        pending += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_run_holds_the_config_every_step_the_model_and_the_exit(tracked):
    result = tracked["result"]
    (run_dir,) = glob.glob(os.path.join(tracked["wandb_dir"], "wandb", f"offline-run-*-{result.run_id}"))
    records = list(_wandb_records(os.path.join(run_dir, f"run-{result.run_id}.wandb")))

    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == result.run_id
    assert run.display_name == "trackers"
    assert run.project == "trainwire-tests"
    config = {u.key: json.loads(u.value_json) for u in run.config.update if u.key}
    assert config["lr"] == 0.01
    assert config["optimizer"] == {"name": "sgd", "momentum": 0.9}
    assert config["num_workers"] == 2
    assert config["trainwire_run_id"] == result.run_id

    history = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            history.append(row)
    assert [row["_step"] for row in history] == STEPS
    assert [row["loss"] for row in history] == pytest.approx(LOSSES)
    assert [row["extra/lr"] for row in history] == pytest.approx([0.01 * s for s in STEPS])
    assert all("phase" not in row for row in history)

    (artifact,) = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert artifact.type == "model"
    assert artifact.name == f"checkpoint_{result.run_id}"
    digests = {entry.path: entry.digest for entry in artifact.manifest.contents}
    # W&B's digest is the file's base64 md5: the best checkpoint's file (step 1), not the latest's.
    assert digests["state.txt"] == base64.b64encode(hashlib.md5(b"step 1").digest()).decode()

    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0


# --- TensorBoard ----------------------------------------------------------------------------
def _scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorflow.python.summary.summary_iterator import summary_iterator

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for event in summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def test_tensorboard_event_files_hold_every_step_and_the_hparams(tracked):
    run_dir = os.path.join(tracked["tb_dir"], "trackers")
    scalars = _scalars(run_dir)
    assert set(scalars) == {"loss", "acc", "extra/lr"}
    assert [s for s, _ in scalars["loss"]] == STEPS
    assert [v for _, v in scalars["loss"]] == pytest.approx(LOSSES)
    assert [v for _, v in scalars["acc"]] == pytest.approx([1.0 - x for x in LOSSES])
    # The HParams view: the params beside the final metrics, in the run's "hparams" folder.
    final = _scalars(os.path.join(run_dir, "hparams"))
    assert final["final/loss"] == [(0, pytest.approx(LOSSES[-1]))]
