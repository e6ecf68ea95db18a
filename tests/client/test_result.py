"""``Result``'s store side, as Ray's: ``filesystem`` holds ``path``, and ``Result.from_path`` reads a run back."""

from __future__ import annotations

import os
import tempfile

import pyarrow.fs
import pytest

from trainwire import train
from trainwire.data_parallel import DataParallelTrainer
from trainwire.result import Result
from trainwire.train import Checkpoint, ScalingConfig
from trainwire_core.errors import NotFoundError

pytestmark = pytest.mark.timeout(240)


def three_reports_loop(config):
    for step in range(3):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            train.report({"loss": 10.0 - step, "step": step}, checkpoint=Checkpoint.from_directory(d))


def test_from_path_reads_the_run_back_and_filesystem_holds_its_path(coordinator):
    result = DataParallelTrainer(three_reports_loop, scaling_config=ScalingConfig(num_workers=1)).fit()

    fs = result.filesystem
    location = result.path.split("?", 1)[0].removeprefix("file://")
    assert isinstance(fs, pyarrow.fs.LocalFileSystem)
    assert fs.get_file_info(location).type == pyarrow.fs.FileType.Directory

    restored = Result.from_path(result.path)
    assert restored.run_id == result.run_id and restored.path == result.path
    assert restored.metrics["loss"] == 8.0 and restored.metrics["step"] == 2
    assert list(restored.metrics_dataframe["loss"]) == [10.0, 9.0, 8.0]
    assert restored.checkpoint is not None and restored.checkpoint.uri == result.checkpoint.uri
    with restored.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "step")).read() == "2"
    # The path without its scheme names the same run (Ray's paths have none).
    assert Result.from_path(location).run_id == result.run_id


def test_from_path_of_no_run_is_not_found(coordinator):
    with pytest.raises(NotFoundError):
        Result.from_path("file:///nowhere/runs/run-that-does-not-exist")


def rank_return_loop(config):
    train.report({"step": 1})
    return {"rank": train.get_context().get_world_rank(), "fn": lambda x: x + 1}


def test_return_value_is_rank_zero_loop_return(coordinator):
    result = DataParallelTrainer(rank_return_loop, scaling_config=ScalingConfig(num_workers=2)).fit()
    assert result.return_value["rank"] == 0
    assert result.return_value["fn"](1) == 2  # cloudpickled: a lambda travels
    assert Result.from_path(result.path).return_value["rank"] == 0


def test_read_return_value_is_none_without_the_file_and_a_default_frame_is_none(tmp_path):
    from trainwire.result import read_return_value

    assert read_return_value(str(tmp_path)) is None
    assert read_return_value("") is None
    result = Result(metrics={}, checkpoint=None, error=None, path="")
    assert result.metrics_dataframe is None and result.return_value is None
