"""Config objects and checkpoint retention as plain objects (no servers)."""

from __future__ import annotations

import pytest

from trainwire import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
from trainwire_coordinator.execution.run_state import FailurePolicy
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import ManifestEntry, Store
from trainwire_core.structs import flatten_metrics
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ScalingConfig(num_workers=-1), "scaling_config.num_workers"),
        (lambda: ScalingConfig(placement_strategy="NEAR"), "scaling_config.placement_strategy"),
        (lambda: ScalingConfig(resources_per_worker={"CPU": -1}), "scaling_config.resources_per_worker"),
        (lambda: FailureConfig(max_failures=-2), "run_config.failure_config.max_failures"),
        (lambda: CheckpointConfig(num_to_keep=0), "run_config.checkpoint_config.num_to_keep"),
        (lambda: CheckpointConfig(checkpoint_score_order="up"), "run_config.checkpoint_config.checkpoint_score_order"),
        (lambda: RunConfig(name="a/b"), "run_config.name"),
    ],
)
def test_bad_configs_name_the_field(make, field):
    with pytest.raises(InvalidArgumentError) as info:
        make()
    assert info.value.field == field
    assert field.split(".")[-1] in info.value.message


def test_configs_round_trip_through_protos():
    run = RunConfig(
        name="x",
        stop={"training_iteration": 5},
        failure_config=FailureConfig(max_failures=-1),
        checkpoint_config=CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="acc", checkpoint_frequency=2),
    )
    assert RunConfig.from_proto(run.to_proto()) == run
    scaling = ScalingConfig(num_workers=3, resources_per_worker={"CPU": 2}, placement_strategy="SPREAD")
    assert ScalingConfig.from_proto(scaling.to_proto()) == scaling
    assert ScalingConfig(use_gpu=True).worker_resources == {"CPU": 1.0, "GPU": 1.0}


def test_failure_policy():
    error = common_pb2.WorkerError()
    assert FailurePolicy(FailureConfig(max_failures=2)).should_restart(2, error)
    assert not FailurePolicy(FailureConfig(max_failures=2)).should_restart(3, error)
    assert FailurePolicy(FailureConfig(max_failures=-1)).should_restart(100, error)
    assert not FailurePolicy(FailureConfig(max_failures=-1, fail_fast=True)).should_restart(1, error)


def _commit(manager: CheckpointManager, store: Store, index: int, metrics: dict) -> None:
    checkpoint_id = f"checkpoint_{index:06d}"
    store.write_bytes(f"{store.checkpoint_dir('run', checkpoint_id)}/f", b"x")
    manager.commit(checkpoint_id, index, metrics, [ManifestEntry("f", 1, "0" * 64)])


def test_retention_without_a_score_keeps_the_newest(tmp_path):
    store = Store(str(tmp_path))
    manager = CheckpointManager(store, "run", "name", CheckpointConfig(num_to_keep=2))
    for index in range(1, 5):
        _commit(manager, store, index, {"loss": index})
    assert [c.index for c in manager.ranked()] == [4, 3]
    assert sorted(store.list_dir(store.path("runs", "run", "checkpoints"))) == [
        "checkpoint_000003",
        "checkpoint_000004",
    ]


def test_retention_by_a_nested_score_and_unscored_rank_last(tmp_path):
    store = Store(str(tmp_path))
    config = CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="valid/acc", checkpoint_score_order="max")
    manager = CheckpointManager(store, "run", "name", config)
    _commit(manager, store, 1, {"valid": {"acc": 0.9}})
    _commit(manager, store, 2, {"valid": {"acc": 0.7}})
    _commit(manager, store, 3, {})
    # Best (0.9) plus the latest (unscored) are kept.
    assert [c.index for c in manager.ranked()] == [1, 3]
    assert store.read_json(store.index_path("run"))["best"] == "checkpoint_000001"


def test_retention_keeps_the_versions_an_alias_or_a_route_serves(tmp_path):
    from trainwire_coordinator.integrations.model_registry import ModelRegistry

    store = Store(str(tmp_path))
    manager = CheckpointManager(store, "run", "name", CheckpointConfig(num_to_keep=1))
    registry = ModelRegistry(store)
    _commit(manager, store, 1, {})
    registry.set_alias("name", "production", "checkpoint_000001")
    _commit(manager, store, 2, {})
    registry.set_route("name", [("checkpoint_000002", 100)], shadow="production")
    for index in (3, 4):
        _commit(manager, store, index, {})
    kept = ["checkpoint_000001", "checkpoint_000002", "checkpoint_000004"]
    assert sorted(store.list_dir(store.path("runs", "run", "checkpoints"))) == kept
    assert [c["id"] for c in store.read_json(store.index_path("run"))["checkpoints"]] == kept
    # Once nothing serves them, the next commit drops them.
    registry.set_route("name", [])
    registry.set_alias("name", "production", "checkpoint_000004")
    _commit(manager, store, 5, {})
    assert sorted(store.list_dir(store.path("runs", "run", "checkpoints"))) == [
        "checkpoint_000004",
        "checkpoint_000005",
    ]


def test_flatten_metrics():
    assert flatten_metrics({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a/b": 1, "a/c/d": 2, "e": 3}


def test_a_missing_framework_is_reported_with_the_install_hint():
    from trainwire_core.errors import FrameworkNotInstalledError
    from trainwire_core.frameworks import require_installed

    with pytest.raises(FrameworkNotInstalledError) as info:
        require_installed("no_such_module_xyz", "Horovod", "horovod")
    assert "pip install horovod" in info.value.message
    assert info.value.code.name == "FAILED_PRECONDITION"


def test_ranks_writing_the_same_file_commit_what_the_manifest_lists(tmp_path):
    from trainwire_core.manifest import verify_checkpoint

    store = Store(str(tmp_path))
    manager = CheckpointManager(store, "run", "name", CheckpointConfig())
    directory = store.checkpoint_dir("run", "checkpoint_000001")
    parts = {}
    for rank, files in {0: {"model.pkl": b"rank zero"}, 1: {"model.pkl": b"rank one!", "shard_1.bin": b"1"}}.items():
        local = tmp_path / f"local{rank}"
        local.mkdir()
        for name, data in files.items():
            (local / name).write_bytes(data)
        upload_to = directory if rank == 0 else store.rank_staging_dir(directory, rank)
        parts[rank] = store.upload_dir(local, upload_to)
    committed = manager.commit("checkpoint_000001", 1, {}, parts[0], {1: parts[1]})
    assert [f["path"] for f in committed.files] == ["model.pkl", "shard_1.bin"]
    assert store.read_bytes(f"{directory}/model.pkl") == b"rank zero"  # rank 0's file is kept
    assert verify_checkpoint(store, directory) == 2
    assert set(store.list_dir(directory)) == {"model.pkl", "shard_1.bin", "manifest.json"}  # nothing left aside


def test_elastic_resize_monitor_interval_s_defaults_as_ray_and_refuses_a_negative():
    assert ScalingConfig(num_workers=(1, 2)).elastic_resize_monitor_interval_s == 60.0
    assert ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=0).elastic_resize_monitor_interval_s == 0
    with pytest.raises(ValueError, match="elastic_resize_monitor_interval_s"):
        ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=-1)


def test_logging_config_travels_as_the_workers_log_level_and_a_bad_one_is_refused():
    from trainwire.train import LoggingConfig

    assert RunConfig(logging_config=LoggingConfig(log_level="debug")).to_proto().log_level == "DEBUG"
    assert RunConfig().to_proto().log_level == ""
    with pytest.raises(InvalidArgumentError, match="logging_config"):
        RunConfig(logging_config="DEBUG")
