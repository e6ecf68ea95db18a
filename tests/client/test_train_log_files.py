"""``RunConfig(log_to_file=...)``: the workers' stdout and stderr in files of the run's directory, as Ray's."""

from __future__ import annotations

import os
import sys

import pytest

from trainwire import RunConfig, ScalingConfig
from trainwire.config import log_file_names
from trainwire.data_parallel import DataParallelTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import resolve

pytestmark = pytest.mark.timeout(240)


def printing_loop():
    from trainwire import train

    rank = train.get_context().get_world_rank()
    print(f"out of rank {rank}", flush=True)
    print(f"err of rank {rank}", file=sys.stderr, flush=True)
    train.report({"done": 1})


def _read(run_path: str, name: str) -> str:
    fs, root = resolve(run_path)
    with fs.open_input_stream(os.path.join(root, name)) as f:
        return f.read().decode()


def test_log_to_file_pair_writes_each_ranks_streams_to_their_files(coordinator):
    result = DataParallelTrainer(
        printing_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(log_to_file=("out.log", "err.log")),
    ).fit()
    out, err = _read(result.path, "out.log"), _read(result.path, "err.log")
    assert "out of rank 0" in out and "out of rank 1" in out and "err of rank" not in out
    assert "err of rank 0" in err and "err of rank 1" in err and "out of rank" not in err


def test_log_to_file_names_as_ray_reads_them():
    assert log_file_names(False) is None
    assert log_file_names(True) == ("stdout", "stderr")
    assert log_file_names("all.log") == ("all.log", "all.log")
    assert log_file_names(("o", "e")) == ("o", "e")
    for bad in ("../out", "/tmp/out", ("a",), 3):
        with pytest.raises(InvalidArgumentError) as info:
            RunConfig(log_to_file=bad)
        assert info.value.field == "run_config.log_to_file"
