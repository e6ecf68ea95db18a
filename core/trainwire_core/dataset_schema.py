"""What the coordinator knows about a dataset before a run starts, shared by the coordinator and the backends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetSchema:
    """A resolved dataset: where it is, its file format and its columns."""

    uri: str
    format: str
    columns: tuple[str, ...]
