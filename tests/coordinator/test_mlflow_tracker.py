"""The coordinator's MLflow tracking (setting ``mlflow_uri``), read back from a real ``mlflow server``."""

from __future__ import annotations

import pathlib
import socket
import time

import pytest
from mlflow_server import mlflow_uri  # noqa: F401 - the fixture

from trainwire.config import CheckpointConfig
from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
from trainwire_coordinator.integrations.mlflow_tracker import (
    ARTIFACT_CHECKPOINT_TAG,
    ARTIFACT_SKIPPED_TAG,
    BEST_CHECKPOINT_TAG,
    CHECKPOINT_ID_TAG,
    RUN_ID_TAG,
    SKIPPED_TAG,
    MlflowTracker,
)
from trainwire_coordinator.integrations.model_registry import ModelRegistry
from trainwire_coordinator.metadata import RunRecord, open_metadata_store
from trainwire_coordinator.settings import CoordinatorSettings
from trainwire_core.storage import Store
from trainwire_core.structs import to_struct
from trainwire_core.v1 import common_pb2, coordinator_pb2

pytestmark = pytest.mark.timeout(300)


def _state(run_id: str, state: int, reason: str = "") -> coordinator_pb2.RunEvent:
    return coordinator_pb2.RunEvent(run_id=run_id, state_change=coordinator_pb2.StateChange(state=state, reason=reason))


def _report(run_id: str, index: int, metrics: dict) -> coordinator_pb2.RunEvent:
    event = coordinator_pb2.RunEvent(
        run_id=run_id, metrics=coordinator_pb2.MetricsEvent(report_index=index, metrics=to_struct(metrics, "m"))
    )
    event.time.FromMilliseconds(1_700_000_000_000 + index)
    return event


def _checkpoint(run_id: str, index: int, loss: float) -> common_pb2.CheckpointInfo:
    return common_pb2.CheckpointInfo(
        checkpoint_id=f"checkpoint_{index:06d}",
        uri=f"file:///store/runs/{run_id}/checkpoints/checkpoint_{index:06d}",
        index=index,
        metrics=to_struct({"loss": loss}, "m"),
    )


class Runs:
    """A real SQLite metadata store holding the runs' records, as the coordinator writes them."""

    def __init__(self, path) -> None:
        self.metadata = open_metadata_store(str(path))

    def save(self, run: coordinator_pb2.Run) -> None:
        record = RunRecord(
            run_id=run.run_id,
            name=run.name,
            state=run.state,
            created_at=0.0,
            updated_at=0.0,
            data=run.SerializeToString(),
        )
        if self.metadata.get_run(run.run_id) is None:
            self.metadata.create_run(record)
        else:
            self.metadata.update_run(record)


def _search(client, run_id: str):
    (run,) = client.search_runs(
        [client.get_experiment_by_name(EXPERIMENT).experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'"
    )
    return run


def _history(client, mlflow_run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(mlflow_run_id, key))


EXPERIMENT = "trainwire-coordinator-tracker"


def test_every_run_is_logged_from_its_events(mlflow_uri, tmp_path):  # noqa: F811 - the fixture
    from mlflow import MlflowClient

    runs = Runs(tmp_path / "state.db")
    # A: plain-data config (a search trial's overrides merged in), three reports, two checkpoints kept.
    a = coordinator_pb2.Run(run_id="a" * 16, name="plain-config", state=common_pb2.PENDING, framework="torch")
    a.request.framework = "torch"
    a.request.scaling_config.num_workers = 2
    spec = a.request.data_parallel
    spec.train_loop.entry_point = "pkg.train:loop"
    spec.train_loop_config.CopyFrom(to_struct({"lr": 0.1, "layers": [8, 4], "opt": {"name": "adam"}}, "c"))
    spec.config_overrides.CopyFrom(to_struct({"lr": 0.05}, "c"))
    spec.backend_config.CopyFrom(to_struct({"backend": "gloo"}, "c"))
    # B: pickled code and config only: never opened, so no config params; it fails.
    b = coordinator_pb2.Run(run_id="b" * 16, name="pickled-config", state=common_pb2.PENDING, framework="torch")
    b.request.scaling_config.num_workers = 1
    b.request.data_parallel.train_loop.pickled_function = b"\x80 not a pickle"
    b.request.data_parallel.pickled_train_loop_config = b"\x80 not a pickle either"
    b.request.data_parallel.train_loop_config.CopyFrom(to_struct({"ignored": 1}, "c"))
    # C: GBDT params; its steps are its training_iteration; it is cancelled.
    c = coordinator_pb2.Run(run_id="c" * 16, name="gbdt", state=common_pb2.PENDING, framework="xgboost")
    c.request.scaling_config.num_workers = 1
    c.request.gbdt.params.CopyFrom(to_struct({"max_depth": 3, "eta": 0.3}, "c"))
    c.request.gbdt.label_column = "y"
    c.request.gbdt.num_boost_round = 10
    for run in (a, b, c):
        runs.save(run)

    tracker = MlflowTracker(mlflow_uri, runs.metadata, experiment_name=EXPERIMENT)
    events = []
    for run in (a, b, c):
        events += [_state(run.run_id, common_pb2.PENDING), _state(run.run_id, common_pb2.RUNNING)]
    for i, loss in enumerate([0.9, 0.2, 0.5], start=1):
        events.append(_report(a.run_id, i, {"loss": loss, "nested": {"acc": 1 - loss}, "note": "text"}))
        events.append(_report(c.run_id, i, {"rmse": loss, "training_iteration": 10 * i}))
    events.append(_report(b.run_id, 1, {"loss": 7.0}))
    for event in events:
        tracker.observe(event)

    a.state = common_pb2.SUCCEEDED
    a.best_checkpoints.extend([_checkpoint(a.run_id, 2, 0.2), _checkpoint(a.run_id, 3, 0.5)])
    a.latest_checkpoint.CopyFrom(_checkpoint(a.run_id, 3, 0.5))
    b.state, b.state_reason = common_pb2.FAILED, "rank 0 raised ValueError"
    c.state = common_pb2.CANCELLED
    for run in (a, b, c):
        runs.save(run)
    tracker.observe(_state(a.run_id, common_pb2.SUCCEEDED))
    tracker.observe(_state(b.run_id, common_pb2.FAILED, "rank 0 raised ValueError"))
    tracker.observe(_state(c.run_id, common_pb2.CANCELLED))
    tracker.close(timeout_s=60)
    assert tracker.dropped == 0

    client = MlflowClient(mlflow_uri)
    ra = _search(client, a.run_id)
    assert ra.info.run_name == "plain-config"
    assert ra.info.status == "FINISHED"
    assert ra.data.params == {
        "lr": "0.05",
        "layers": "[8, 4]",
        "opt/name": "adam",
        "data_parallel/train_loop/entry_point": "pkg.train:loop",
        "data_parallel/backend_config/backend": "gloo",
        "num_workers": "2",
    }
    assert set(ra.data.metrics) == {"loss", "nested/acc"}
    assert _history(client, ra.info.run_id, "loss") == [(1, 0.9), (2, 0.2), (3, 0.5)]
    assert _history(client, ra.info.run_id, "nested/acc") == [(1, pytest.approx(0.1)), (2, 0.8), (3, 0.5)]
    assert [m.timestamp for m in client.get_metric_history(ra.info.run_id, "loss")] == [
        1_700_000_000_001,
        1_700_000_000_002,
        1_700_000_000_003,
    ]
    # The best checkpoint (loss 0.2), not the latest.
    assert ra.data.tags[BEST_CHECKPOINT_TAG] == a.best_checkpoints[0].uri
    assert ra.data.tags["trainwire.framework"] == "torch"
    assert SKIPPED_TAG not in ra.data.tags

    rb = _search(client, b.run_id)
    assert rb.info.status == "FAILED"
    assert rb.data.params == {"num_workers": "1"}
    assert rb.data.tags[SKIPPED_TAG] == "pickled_train_loop_config,train_loop.pickled_function"
    assert rb.data.tags["trainwire.state_reason"] == "rank 0 raised ValueError"
    assert BEST_CHECKPOINT_TAG not in rb.data.tags
    assert _history(client, rb.info.run_id, "loss") == [(1, 7.0)]

    rc = _search(client, c.run_id)
    assert rc.info.status == "KILLED"
    assert rc.data.params == {
        "max_depth": "3",
        "eta": "0.3",
        "gbdt/label_column": "y",
        "gbdt/num_boost_round": "10",
        "num_workers": "1",
    }
    assert _history(client, rc.info.run_id, "rmse") == [(10, 0.9), (20, 0.2), (30, 0.5)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_mlflow_never_blocks_nor_fails_the_event_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    runs = Runs(tmp_path / "state.db")
    run = coordinator_pb2.Run(run_id="d" * 16, name="down", state=common_pb2.RUNNING)
    runs.save(run)
    tracker = MlflowTracker(f"http://127.0.0.1:{_closed_port()}", runs.metadata, max_queued_events=5)
    started = time.perf_counter()
    tracker.observe(_state(run.run_id, common_pb2.RUNNING))
    for i in range(1, 2001):
        tracker.observe(_report(run.run_id, i, {"loss": 1.0 / i}))
    elapsed = time.perf_counter() - started
    # 2001 events in well under a millisecond each; what the queue cannot hold is dropped.
    assert elapsed < 0.5, elapsed
    assert tracker.dropped >= 2001 - 5 - 500
    closing = time.perf_counter()
    tracker.close(timeout_s=3)
    assert time.perf_counter() - closing < 5


def test_the_setting_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("TRAINWIRE_COORDINATOR_MLFLOW_URI", "http://mlflow.internal:5000")
    assert CoordinatorSettings().mlflow_uri == "http://mlflow.internal:5000"
    monkeypatch.delenv("TRAINWIRE_COORDINATOR_MLFLOW_URI")
    assert CoordinatorSettings().mlflow_uri == ""
    assert CoordinatorSettings().mlflow_max_artifact_bytes == 1024**3
    monkeypatch.setenv("TRAINWIRE_COORDINATOR_MLFLOW_MAX_ARTIFACT_BYTES", "4096")
    assert CoordinatorSettings().mlflow_max_artifact_bytes == 4096


def _committed_run(store: Store, runs: Runs, run_id: str, name: str, losses: dict[str, float], tmp_path) -> None:
    """A run that committed one checkpoint per ``losses`` item (files naming it) and ended SUCCEEDED."""
    manager = CheckpointManager(
        store, run_id, name, CheckpointConfig(checkpoint_score_attribute="loss", checkpoint_score_order="min")
    )
    run = coordinator_pb2.Run(run_id=run_id, name=name, state=common_pb2.SUCCEEDED, framework="torch")
    run.request.scaling_config.num_workers = 1
    for index, (checkpoint_id, loss) in enumerate(losses.items(), start=1):
        src = tmp_path / f"{run_id}-{checkpoint_id}"
        (src / "weights").mkdir(parents=True)
        (src / "state.txt").write_text(checkpoint_id)
        (src / "weights" / "layer0.bin").write_bytes(checkpoint_id.encode() * 100)
        files = store.upload_dir(src, store.checkpoint_dir(run_id, checkpoint_id))
        committed = manager.commit(checkpoint_id, index, {"loss": loss}, files)
        run.latest_checkpoint.CopyFrom(manager.info(committed))
    # The predictor's compiled cache beside a checkpoint is not the checkpoint: never uploaded.
    for checkpoint_id in losses:
        compiled = pathlib.Path(store.checkpoint_dir(run_id, checkpoint_id), ".compiled")
        compiled.mkdir()
        (compiled / "model.so").write_bytes(b"cache")
    assert manager.best is not None and manager.best.checkpoint_id == min(losses, key=losses.get)
    run.best_checkpoints.extend(manager.info(c) for c in manager.ranked())
    runs.save(run)


def _end(tracker: MlflowTracker, run_id: str) -> None:
    for state in (common_pb2.PENDING, common_pb2.RUNNING, common_pb2.SUCCEEDED):
        tracker.observe(_state(run_id, state))


def _artifact_files(client, mlflow_run_id: str, path: str, tmp_path) -> dict[str, bytes]:
    local = pathlib.Path(client.download_artifacts(mlflow_run_id, path, str(tmp_path)))
    return {p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()}


def test_the_best_checkpoint_is_the_runs_model_artifact_unless_too_big_or_damaged(mlflow_uri, tmp_path):  # noqa: F811
    from mlflow import MlflowClient

    store = Store(str(tmp_path / "store"))
    runs = Runs(tmp_path / "state.db")
    _committed_run(store, runs, "e" * 16, "artifact", {"ck1": 0.5, "ck2": 0.1, "ck3": 0.3}, tmp_path)
    _committed_run(store, runs, "f" * 16, "damaged", {"ck1": 0.5}, tmp_path)
    _committed_run(store, runs, "g" * 16, "too-big", {"ck1": 0.5}, tmp_path)
    # A file changed after the commit (same size): its sha256 no longer matches the manifest.
    pathlib.Path(store.checkpoint_dir("f" * 16, "ck1"), "state.txt").write_text("ck9")

    tracker = MlflowTracker(mlflow_uri, runs.metadata, experiment_name=EXPERIMENT)
    _end(tracker, "e" * 16)
    _end(tracker, "f" * 16)
    tracker.close(timeout_s=60)
    # Its checkpoint has 2 files of 3 and 300 bytes plus the manifest: over 100 bytes.
    small = MlflowTracker(mlflow_uri, runs.metadata, experiment_name=EXPERIMENT, max_artifact_bytes=100)
    _end(small, "g" * 16)
    small.close(timeout_s=60)

    client = MlflowClient(mlflow_uri)
    run = _search(client, "e" * 16)
    assert run.info.status == "FINISHED"
    # The best (lowest loss) checkpoint, ck2, not the latest (ck3): its files and manifest, no cache.
    assert run.data.tags[ARTIFACT_CHECKPOINT_TAG] == "ck2"
    assert ARTIFACT_SKIPPED_TAG not in run.data.tags
    files = _artifact_files(client, run.info.run_id, "checkpoint", tmp_path / "e")
    assert set(files) == {"state.txt", "weights/layer0.bin", "manifest.json"}
    assert files["state.txt"] == b"ck2"
    assert files["weights/layer0.bin"] == b"ck2" * 100
    assert files["manifest.json"] == pathlib.Path(store.checkpoint_dir("e" * 16, "ck2"), "manifest.json").read_bytes()

    damaged = _search(client, "f" * 16)
    assert damaged.info.status == "FINISHED"
    assert ARTIFACT_CHECKPOINT_TAG not in damaged.data.tags
    assert "'state.txt' has sha256" in damaged.data.tags[ARTIFACT_SKIPPED_TAG]
    assert client.list_artifacts(damaged.info.run_id) == []
    assert damaged.data.tags[BEST_CHECKPOINT_TAG].endswith("/checkpoints/ck1")

    big = _search(client, "g" * 16)
    assert big.info.status == "FINISHED"
    assert client.list_artifacts(big.info.run_id) == []
    assert "over mlflow_max_artifact_bytes (100)" in big.data.tags[ARTIFACT_SKIPPED_TAG]
    assert big.data.tags[BEST_CHECKPOINT_TAG] == store.uri_of(store.checkpoint_dir("g" * 16, "ck1"))


def test_aliases_are_mirrored_as_mlflow_registry_aliases(mlflow_uri, tmp_path):  # noqa: F811
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    store = Store(str(tmp_path / "store"))
    runs = Runs(tmp_path / "state.db")
    run_id = "h" * 16
    _committed_run(store, runs, run_id, "ranker", {"c1": 0.1, "c2": 0.4}, tmp_path)
    tracker = MlflowTracker(mlflow_uri, runs.metadata, experiment_name=EXPERIMENT)
    registry = ModelRegistry(store)
    registry.observers.append(tracker.observe_alias)
    client = MlflowClient(mlflow_uri)
    try:
        _end(tracker, run_id)  # c1, the best, becomes the run's artifact checkpoint/
        assert tracker.flush()
        mlflow_run = _search(client, run_id)
        root = mlflow_run.info.artifact_uri

        registry.set_alias("ranker", "production", "c1")
        assert tracker.flush()
        a = client.get_model_version_by_alias("ranker", "production")
        assert a.tags[CHECKPOINT_ID_TAG] == "c1" and a.tags[RUN_ID_TAG] == run_id
        assert (a.source, a.run_id) == (f"{root}/checkpoint", mlflow_run.info.run_id)

        registry.set_alias("ranker", "production", "c2")
        registry.set_alias("ranker", "canary", "c1")
        assert tracker.flush()
        b = client.get_model_version_by_alias("ranker", "production")
        assert b.version != a.version and b.tags[CHECKPOINT_ID_TAG] == "c2"
        # c2 is not the run's artifact: it was uploaded for the alias, beside it.
        assert (b.source, b.run_id) == (f"{root}/checkpoints/c2", mlflow_run.info.run_id)
        files = _artifact_files(client, mlflow_run.info.run_id, "checkpoints/c2", tmp_path / "b")
        assert files["state.txt"] == b"c2" and ".compiled/model.so" not in files
        # The same checkpoint is the same model version.
        assert client.get_model_version_by_alias("ranker", "canary").version == a.version

        registry.delete_alias("ranker", "production")
        assert tracker.flush()
        with pytest.raises(MlflowException) as missing:
            client.get_model_version_by_alias("ranker", "production")
        assert "alias production not found" in str(missing.value)
        model = client.get_registered_model("ranker")
        assert model.aliases == {"canary": a.version}
        assert sorted(v.tags[CHECKPOINT_ID_TAG] for v in client.search_model_versions("name = 'ranker'")) == [
            "c1",
            "c2",
        ]
    finally:
        tracker.close(timeout_s=60)
    assert tracker.dropped == 0


def _loop(config):
    import os
    import tempfile

    from trainwire import train
    from trainwire.train import Checkpoint

    for step, loss in enumerate(config["losses"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.txt"), "w") as f:
                f.write(f"step {step}")
            train.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))


def test_a_coordinator_with_mlflow_uri_logs_each_fit(ray_cluster, mlflow_uri, tmp_path, monkeypatch):  # noqa: F811
    from mlflow import MlflowClient

    import trainwire.session_client as session_client
    from trainwire import CheckpointConfig, RunConfig, ScalingConfig
    from trainwire.client import CoordinatorClient
    from trainwire.data_parallel import DataParallelTrainer
    from trainwire.model_registry import ModelRegistryClient
    from trainwire_coordinator.server import CoordinatorThread

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
    thread = CoordinatorThread(
        CoordinatorSettings(
            host="127.0.0.1",
            port=0,
            store=str(tmp_path / "store"),
            state=str(tmp_path / "state.db"),
            watch_poll_s=0.2,
            worker_pool_idle_s=0,
            capacity_wait_s=0,
            mlflow_uri=mlflow_uri,
        )
    )
    address = thread.start()
    client = CoordinatorClient(address)
    try:
        monkeypatch.setattr(session_client, "_client", client)
        result = DataParallelTrainer(
            _loop,
            train_loop_config={"losses": [0.4, 0.1, 0.3]},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(
                name="coordinator-tracked",
                verbose=0,
                checkpoint_config=CheckpointConfig(checkpoint_score_attribute="loss", checkpoint_score_order="min"),
            ),
        ).fit()
        best = client.get_run(result.run_id).best_checkpoints[0]
        with ModelRegistryClient(address) as registry:
            registry.set_alias("coordinator-tracked", "production", best.checkpoint_id)
    finally:
        monkeypatch.undo()
        client.close()
        thread.stop()  # logs what is queued before it returns

    mlflow = MlflowClient(mlflow_uri)
    run = _search(mlflow, result.run_id)
    assert run.info.run_name == "coordinator-tracked"
    assert run.info.status == "FINISHED"
    # The SDK sends train_loop_config pickled: the coordinator logs none of it.
    assert run.data.params == {"num_workers": "1"}
    assert "pickled_train_loop_config" in run.data.tags[SKIPPED_TAG]
    assert _history(mlflow, run.info.run_id, "loss") == [(1, 0.4), (2, 0.1), (3, 0.3)]
    # The best checkpoint by "min" loss: the second report's, its files the run's artifact.
    assert best.metrics["loss"] == 0.1
    assert run.data.tags[BEST_CHECKPOINT_TAG] == best.uri
    assert run.data.tags[ARTIFACT_CHECKPOINT_TAG] == best.checkpoint_id
    local = mlflow.download_artifacts(run.info.run_id, "checkpoint/state.txt", str(tmp_path))
    assert pathlib.Path(local).read_text() == "step 1"
    # The alias set through the coordinator's ModelRegistry service is MLflow's alias too.
    version = mlflow.get_model_version_by_alias("coordinator-tracked", "production")
    assert version.tags[CHECKPOINT_ID_TAG] == best.checkpoint_id
    assert version.source == f"{run.info.artifact_uri}/checkpoint"
