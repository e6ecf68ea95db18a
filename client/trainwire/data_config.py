"""Which datasets a data-parallel run splits across its workers (Ray Train's ``DataConfig``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2

FIELD = "data_parallel.data_config.datasets_to_split"


@dataclass
class DataConfig:
    """The datasets split across the workers; every other dataset reaches every worker whole.

    The default splits ``train`` only, as Ray 2.4 did (scripts written for it validate on
    rank 0 alone, or on every rank over the whole validation set). Ray 2.7 and later split
    every dataset: pass ``DataConfig(datasets_to_split="all")`` for their scripts.

    Args:
        datasets_to_split: ``"all"``, or the names of the datasets to split.
    """

    datasets_to_split: Literal["all"] | list[str] = field(default_factory=lambda: ["train"])

    def __post_init__(self) -> None:
        names = self.datasets_to_split
        if names == "all":
            return
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise InvalidArgumentError(
                f'datasets_to_split must be "all" or a list of dataset names, got {names!r}', field=FIELD
            )
        self.datasets_to_split = list(names)

    def to_proto(self) -> coordinator_pb2.DataConfig:
        if self.datasets_to_split == "all":
            return coordinator_pb2.DataConfig(split_all=True)
        return coordinator_pb2.DataConfig(datasets_to_split=self.datasets_to_split)

    @classmethod
    def coerce(cls, value: Any) -> DataConfig:
        """A ``DataConfig``, or Ray 2.4's ``dataset_config={"valid": DatasetConfig(split=False), ...}``."""
        if value is None:
            return cls()
        if isinstance(value, DataConfig):
            return value
        if isinstance(value, Mapping):
            split = {"train"}
            for name, config in value.items():
                wanted = config.get("split") if isinstance(config, Mapping) else getattr(config, "split", None)
                if wanted is True:
                    split.add(name)
                elif wanted is False:
                    split.discard(name)
            return cls(sorted(split))
        raise InvalidArgumentError(
            f"dataset_config must be a DataConfig, got {type(value).__name__}", field="data_parallel.data_config"
        )


def datasets_to_split(spec: coordinator_pb2.DataParallelSpec, names: list[str]) -> set[str]:
    """The names among ``names`` that a data-parallel spec splits across its workers."""
    if not spec.HasField("data_config"):
        return {"train"} & set(names)
    if spec.data_config.split_all:
        return set(names)
    return set(spec.data_config.datasets_to_split) & set(names)
