"""Which datasets are split across the workers: "train" only by default (Ray 2.4), or as DataConfig says."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from trainwire import DataConfig, ScalingConfig
from trainwire.torch import TorchTrainer
from trainwire_core.errors import InvalidArgumentError


def _frame(rows: int) -> pd.DataFrame:
    return pd.DataFrame({"x": [float(i) for i in range(rows)], "y": [2.0 * i for i in range(rows)]})


def rank_zero_validates() -> None:
    """As Ray's torch_regression_example: every rank trains, rank 0 alone reads the validation set."""
    from trainwire import train

    rank = train.get_context().get_world_rank()
    train_rows = sum(len(b["x"]) for b in train.get_dataset_shard("train").iter_batches(batch_size=16))
    valid_rows = 0
    if rank == 0:
        valid_rows = sum(len(b["x"]) for b in train.get_dataset_shard("valid").iter_batches(batch_size=16))
    train.report({"train_rows": train_rows, "valid_rows": valid_rows})


def every_rank_validates() -> None:
    from trainwire import train

    valid_rows = sum(len(b["x"]) for b in train.get_dataset_shard("valid").iter_batches(batch_size=16))
    train.report({"valid_rows": valid_rows})


def test_by_default_only_train_is_split_and_rank_zero_alone_can_validate(coordinator):
    result = TorchTrainer(
        rank_zero_validates,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": _frame(64), "valid": _frame(24)},
    ).fit()
    assert result.metrics["train_rows"] == 32  # rank 0's half of train
    assert result.metrics["valid_rows"] == 24  # the whole validation set


def test_datasets_to_split_all_splits_every_dataset(coordinator):
    result = TorchTrainer(
        every_rank_validates,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": _frame(16), "valid": _frame(24)},
        dataset_config=DataConfig(datasets_to_split="all"),
    ).fit()
    assert result.metrics["valid_rows"] == 12


def test_ray_24_dataset_config_dicts_are_taken():
    class DatasetConfig:  # Ray 2.4's ray.air.config.DatasetConfig, as scripts pass it
        def __init__(self, split: bool) -> None:
            self.split = split

    config = DataConfig.coerce({"valid": DatasetConfig(split=True), "train": {"split": False}})
    assert config.datasets_to_split == ["valid"]


@pytest.mark.parametrize("bad", ["train", [""], [1]])
def test_a_bad_datasets_to_split_names_the_field(bad):
    with pytest.raises(InvalidArgumentError) as info:
        DataConfig(datasets_to_split=bad)
    assert info.value.field == "data_parallel.data_config.datasets_to_split"


def test_the_coordinator_refuses_a_dataset_it_does_not_have(client):
    from trainwire_core.v1 import coordinator_pb2

    request = coordinator_pb2.FitRequest(framework="torch")
    request.scaling_config.num_workers = 1
    request.data_parallel.train_loop.entry_point = "tests.client.test_data_config:every_rank_validates"
    request.data_parallel.data_config.datasets_to_split.append("valid")
    with pytest.raises(InvalidArgumentError) as info:
        client.fit(request)
    assert info.value.field == "data_parallel.data_config.datasets_to_split" and "'valid'" in info.value.message


def test_a_bare_data_parallel_trainer_runs_its_loop_on_every_worker(coordinator):
    """As ray.train.data_parallel_trainer.DataParallelTrainer: N workers, no process group."""
    from trainwire.train.data_parallel_trainer import DataParallelTrainer

    def loop(config):
        from trainwire import train

        train.report({"world_size": train.get_context().get_world_size(), "scale": config["scale"]})

    result = DataParallelTrainer(
        loop, train_loop_config={"scale": 3}, scaling_config=ScalingConfig(num_workers=2)
    ).fit()
    assert result.metrics == {**result.metrics, "world_size": 2, "scale": 3}


def iterate_twice() -> None:
    from trainwire import train

    shard = train.get_dataset_shard("train")
    epochs = [sorted(float(x) for b in shard.iter_batches(batch_size=8) for x in b["x"]) for _ in range(2)]
    train.report({"same_rows_each_epoch": float(epochs[0] == epochs[1]), "rows": len(epochs[0])})
    print(f"shard: {type(shard).__name__}", flush=True)


def test_a_small_dataset_is_read_once_and_each_rank_iterates_its_own_split(coordinator, capfd):
    """Below materialize_datasets_below_bytes the files are read once per attempt; ranks split its blocks."""
    result = TorchTrainer(
        iterate_twice,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": _frame(64)},
    ).fit()
    history = result.metrics_dataframe
    assert history["same_rows_each_epoch"].tolist() == [1.0]
    assert result.metrics["rows"] == 32  # rank 0's half, the same half every epoch
    assert "shard: MaterializedDataset" in capfd.readouterr().out


def test_a_rank_blocked_on_a_streamed_split_shows_in_the_reason(coordinator, client, monkeypatch):
    """Ray 2.7's datasets_to_split="all" under a rank-0-only validation loop: rank 0 waits on a
    streaming split that rank 1 never reads. The run names the blocked rank instead of waiting silently."""
    import time

    from trainwire_core.v1 import common_pb2

    runs = coordinator.server.runs
    # Stream, as large datasets do, and name a blocked rank after 2 s.
    settings = dataclasses.replace(
        runs.controller_settings, materialize_below_bytes=0, stall_reason_after_s=2.0, stall_fail_after_s=0.0
    )
    monkeypatch.setattr(runs, "controller_settings", settings)
    trainer = TorchTrainer(
        rank_zero_validates,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": _frame(64), "valid": _frame(24)},
        dataset_config=DataConfig(datasets_to_split="all"),
    )
    run = client.fit(trainer.build_request(client))
    try:
        deadline, reason = time.monotonic() + 90, ""
        while time.monotonic() < deadline and "still running" not in reason:
            time.sleep(0.5)
            run = client.get_run(run.run_id)
            reason = run.state_reason
        assert run.state == common_pb2.RUNNING
        assert "ranks 0 still running" in reason, reason
    finally:
        client.cancel_run(run.run_id)


def ordered_rows() -> None:
    from trainwire import train

    xs = [float(x) for b in train.get_dataset_shard("train").iter_batches(batch_size=8) for x in b["x"]]
    train.report({"in_order": xs == sorted(xs), "rows": len(xs)})


def test_execution_options_and_shard_locality_reach_the_split(coordinator):
    from ray.data import ExecutionOptions, ExecutionResources

    options = ExecutionOptions(preserve_order=True, resource_limits=ExecutionResources(cpu=2))
    result = TorchTrainer(
        ordered_rows,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": _frame(64)},
        dataset_config=DataConfig(execution_options={"train": options}, enable_shard_locality=False),
    ).fit()
    assert result.metrics == {"in_order": True, "rows": 32}


def test_execution_options_travel_by_dataset_with_what_applies_to_shards():
    from ray.data import ExecutionOptions, ExecutionResources

    from trainwire_coordinator.execution.datasets import apply_ingest_options

    limited = ExecutionOptions(preserve_order=True, resource_limits=ExecutionResources(cpu=2, object_store_memory=1e9))
    msg = DataConfig(execution_options=limited, enable_shard_locality=False).to_proto()
    assert set(msg.execution_options) == {"*"} and msg.disable_shard_locality
    ingest = msg.execution_options["*"]
    assert ingest.preserve_order and ingest.cpu_limit == 2 and not ingest.HasField("gpu_limit")
    target = ExecutionOptions()
    apply_ingest_options(target, ingest)
    assert target.preserve_order and target.resource_limits.cpu == 2
    assert target.resource_limits.object_store_memory == 1e9
    by_name = DataConfig(execution_options={"valid": ExecutionOptions(preserve_order=True)}).to_proto()
    assert set(by_name.execution_options) == {"valid"} and by_name.execution_options["valid"].preserve_order
    assert not by_name.disable_shard_locality
    with pytest.raises(InvalidArgumentError, match="execution_options"):
        DataConfig(execution_options={"train": {"preserve_order": True}})


def test_default_ingest_options_are_ray_datas_current_ones():
    from ray.data.context import DataContext

    options = DataConfig.default_ingest_options()
    current = DataContext.get_current().execution_options
    assert options.preserve_order == current.preserve_order
    assert options.resource_limits == current.resource_limits
