"""Which datasets a data-parallel run splits across its workers (Ray Train's ``DataConfig``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2

FIELD = "data_parallel.data_config.datasets_to_split"
# ExecutionResources' fields -> IngestOptions' limits.
LIMIT_FIELDS = (("cpu", "cpu_limit"), ("gpu", "gpu_limit"), ("object_store_memory", "object_store_memory_limit"))


@dataclass
class DataConfig:
    """The datasets split across the workers; every other dataset reaches every worker whole.

    The default splits ``train`` only, as Ray 2.4 did (scripts written for it validate on
    rank 0 alone, or on every rank over the whole validation set). Ray 2.7 and later split
    every dataset: pass ``DataConfig(datasets_to_split="all")`` for their scripts.

    Args:
        datasets_to_split: ``"all"``, or the names of the datasets to split.
        execution_options: Ray Data ``ExecutionOptions`` for the shards, one for every dataset or a
            dict of them by dataset name (the others get the coordinator's defaults), as Ray's. What
            applies to shards the coordinator splits travels with the run: ``preserve_order`` and
            ``resource_limits`` (cpu, gpu, object_store_memory); ``locality_with_output`` is a no-op
            in Ray Data 2.60. None: the coordinator's Ray Data defaults.
        enable_shard_locality: Split with the workers' nodes as locality hints (Ray's default), so
            a shard's blocks are read near its worker.
    """

    datasets_to_split: Literal["all"] | list[str] = field(default_factory=lambda: ["train"])
    execution_options: Any = None
    enable_shard_locality: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.enable_shard_locality, bool):
            raise InvalidArgumentError(
                f"enable_shard_locality must be a bool, got {self.enable_shard_locality!r}",
                field="data_parallel.data_config.enable_shard_locality",
            )
        self._ingest = _ingest_options(self.execution_options)
        names = self.datasets_to_split
        if names == "all":
            return
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise InvalidArgumentError(
                f'datasets_to_split must be "all" or a list of dataset names, got {names!r}', field=FIELD
            )
        self.datasets_to_split = list(names)

    @staticmethod
    def default_ingest_options() -> Any:
        """The default Ray Data options for data ingest, as Ray's: carried over from the current DataContext."""
        from ray.data import ExecutionOptions
        from ray.data.context import DataContext

        ctx = DataContext.get_current()
        return ExecutionOptions(
            resource_limits=ctx.execution_options.resource_limits,
            exclude_resources=ctx.execution_options.exclude_resources,
            preserve_order=ctx.execution_options.preserve_order,
            verbose_progress=ctx.execution_options.verbose_progress,
        )

    def to_proto(self) -> coordinator_pb2.DataConfig:
        if self.datasets_to_split == "all":
            msg = coordinator_pb2.DataConfig(split_all=True)
        else:
            msg = coordinator_pb2.DataConfig(datasets_to_split=self.datasets_to_split)
        for name, options in self._ingest.items():
            msg.execution_options[name].CopyFrom(options)
        msg.disable_shard_locality = not self.enable_shard_locality
        return msg

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


def ingest_options(options: Any) -> coordinator_pb2.IngestOptions:
    """What of one Ray Data ``ExecutionOptions`` applies to shards: the order and the resource limits."""
    if not hasattr(options, "resource_limits") or not hasattr(options, "preserve_order"):
        raise InvalidArgumentError(
            f"execution_options must be Ray Data ExecutionOptions or a dict of them, got {type(options).__name__}",
            field="data_parallel.data_config.execution_options",
        )
    msg = coordinator_pb2.IngestOptions(preserve_order=bool(options.preserve_order))
    limits = options.resource_limits
    for attr, name in (
        ("cpu", "cpu_limit"),
        ("gpu", "gpu_limit"),
        ("object_store_memory", "object_store_memory_limit"),
    ):
        value = getattr(limits, attr, None) if limits is not None else None
        if value is not None and value != float("inf"):
            setattr(msg, name, float(value))
    return msg


def _ingest_options(value: Any) -> dict[str, coordinator_pb2.IngestOptions]:
    """``execution_options`` by dataset name, ``"*"`` for every dataset without its own."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(name): ingest_options(options) for name, options in value.items()}
    return {"*": ingest_options(value)}


def datasets_to_split(spec: coordinator_pb2.DataParallelSpec, names: list[str]) -> set[str]:
    """The names among ``names`` that a data-parallel spec splits across its workers."""
    if not spec.HasField("data_config"):
        return {"train"} & set(names)
    if spec.data_config.split_all:
        return set(names)
    return set(spec.data_config.datasets_to_split) & set(names)
