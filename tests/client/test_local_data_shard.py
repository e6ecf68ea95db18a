"""Local mode (``ScalingConfig(num_workers=0)``): a DataFrame dataset reads as a worker's Ray Data shard does.

Ray's GBDT pattern ``get_dataset_shard("train").materialize().to_pandas()`` and the iterator
methods (``iter_batches``, ``iter_torch_batches``, ``iter_rows``) work on the shard the loop gets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from trainwire import train
from trainwire.data_parallel import DataParallelTrainer
from trainwire.train import RunConfig, ScalingConfig
from trainwire.train.local import LocalDataShard

FRAME = pd.DataFrame({"x": np.arange(10, dtype=np.float32), "y": np.arange(10) * 2})


def test_a_local_loop_reads_its_dataframe_as_ray_data_shard(tmp_path):
    seen = {}

    def loop():
        shard = train.get_dataset_shard("train")
        seen["frame"] = shard.materialize().to_pandas()
        seen["sizes"] = [len(b["x"]) for b in shard.iter_batches(batch_size=4)]
        seen["rows"] = shard.materialize().count()
        train.report({"rows": seen["rows"]})

    result = DataParallelTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=0),
        run_config=RunConfig(name="local", storage_path=str(tmp_path)),
        datasets={"train": FRAME},
    ).fit()
    pd.testing.assert_frame_equal(seen["frame"], FRAME)
    assert seen["sizes"] == [4, 4, 2] and result.metrics == {"rows": 10}


def test_batch_formats_drop_last_and_shuffle():
    shard = LocalDataShard(pa.Table.from_pandas(FRAME))
    numpy_batch = next(shard.iter_batches(batch_size=3))
    assert set(numpy_batch) == {"x", "y"} and isinstance(numpy_batch["x"], np.ndarray)
    assert list(numpy_batch["y"]) == [0, 2, 4]
    assert isinstance(next(shard.iter_batches(batch_format="pandas")), pd.DataFrame)
    assert isinstance(next(shard.iter_batches(batch_format="pyarrow")), pa.Table)
    assert [len(b["x"]) for b in shard.iter_batches(batch_size=4, drop_last=True)] == [4, 4]
    shuffled = np.concatenate([b["x"] for b in shard.iter_batches(local_shuffle_buffer_size=10, local_shuffle_seed=1)])
    assert sorted(shuffled) == list(FRAME["x"]) and list(shuffled) != list(FRAME["x"])
    assert next(iter(shard.iter_rows())) == {"x": 0.0, "y": 0}
    assert shard.take(2) == [{"x": 0.0, "y": 0}, {"x": 1.0, "y": 2}] and shard.columns() == ["x", "y"]
    with pytest.raises(ValueError):
        next(shard.iter_batches(batch_format="arrow"))


def test_iter_torch_batches_gives_tensors_of_the_dtypes_asked():
    torch = pytest.importorskip("torch")
    shard = LocalDataShard(FRAME)
    batch = next(shard.iter_torch_batches(batch_size=5, dtypes={"x": torch.float64, "y": torch.float32}))
    assert batch["x"].dtype == torch.float64 and batch["y"].dtype == torch.float32
    assert batch["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    collated = list(shard.iter_torch_batches(batch_size=5, collate_fn=lambda b: b["x"].sum()))
    assert collated == [10.0, 35.0]
