"""Reading datasets and shards on workers (declarative trainers use no Ray Data)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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


def _read_files(uri: str, fmt: str, files: list[str]) -> Iterator[pa.Table]:
    """The files' rows as blocks of at most 128Ki rows, so a large file does not become one huge block."""
    fs, _ = resolve(uri)
    dataset = pads.dataset(files, filesystem=fs, format=fmt)
    empty = True
    for batch in dataset.to_batches(batch_size=1 << 17):
        if batch.num_rows:
            empty = False
            yield pa.Table.from_batches([batch])
    if empty:
        yield dataset.schema.empty_table()


def files_datasource(uri: str, fmt: str = "") -> Any:
    """A Ray Data datasource of the parquet or CSV files at ``uri``: one read task per group of files.

    Unlike ``ray.data.read_parquet`` it starts no listing or sampling task of its own (those ask for
    a CPU each, whatever the caller passes), so every task of a read takes the resources given to
    ``ray.data.read_datasource`` and can run beside a placement group that holds every CPU.
    """
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    fmt = guess_format(uri, fmt)
    dataset = open_dataset(uri, fmt)
    files, schema = list(dataset.files), dataset.schema

    class FilesDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None):
            groups = [
                list(g) for g in np.array_split(np.array(files, dtype=object), max(1, min(parallelism, len(files))))
            ]
            return [
                ReadTask(
                    lambda group=group: _read_files(uri, fmt, group),
                    BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=tuple(group)),
                    schema=schema,
                    per_task_row_limit=per_task_row_limit,
                )
                for group in groups
                if group
            ]

        def get_name(self) -> str:
            return "TrainwireFiles"

    return FilesDatasource()
