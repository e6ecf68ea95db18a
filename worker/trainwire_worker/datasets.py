"""Reading datasets and shards on workers (declarative trainers use no Ray Data)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads

from trainwire.storage import resolve


@dataclass(frozen=True)
class ShardSpec:
    """Rows ``rank`` of ``world_size`` of the dataset at ``uri`` (contiguous blocks)."""

    uri: str
    format: str
    rank: int
    world_size: int
    # cloudpickle of the run's fitted preprocessor, applied after reading.
    preprocessor: bytes = b""


def guess_format(uri: str, declared: str = "") -> str:
    if declared:
        return declared
    return "csv" if uri.rstrip("/").endswith(".csv") else "parquet"


def open_dataset(uri: str, fmt: str = "") -> pads.Dataset:
    fs, path = resolve(uri)
    return pads.dataset(path, filesystem=fs, format=guess_format(uri, fmt))


def read_shard(spec: ShardSpec) -> pa.Table:
    """Reads this rank's block of rows; every row lands on exactly one rank."""
    table = open_dataset(spec.uri, spec.format).to_table()
    bounds = np.linspace(0, table.num_rows, spec.world_size + 1).astype(int)
    start, stop = bounds[spec.rank], bounds[spec.rank + 1]
    shard = table.slice(start, stop - start)
    if spec.preprocessor:
        import cloudpickle

        df = cloudpickle.loads(spec.preprocessor).transform_batch(shard.to_pandas())
        shard = pa.Table.from_pandas(df, preserve_index=False)
    return shard
