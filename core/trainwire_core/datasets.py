"""Where a dataset's rows are: what the coordinator hands workers that read their shard themselves."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.dataset as pads

from trainwire_core.storage import resolve


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
