"""Backends that run the user's training loop on every worker: what they check of the loop."""

from __future__ import annotations

from trainwire_coordinator.backends.base import CoordinatorBackend
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2


class DataParallelBackend(CoordinatorBackend):
    """Runs user code on every worker; subclasses add the framework's setup."""

    name = "data_parallel"
    spec_field = "data_parallel"
    uses_ray_data = True

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        loop = request.data_parallel.train_loop
        source = loop.WhichOneof("source")
        if source is None:
            raise InvalidArgumentError(
                "data_parallel.train_loop needs pickled_function or entry_point",
                field="data_parallel.train_loop",
            )
        if source == "entry_point" and ":" not in loop.entry_point:
            raise InvalidArgumentError(
                f"entry point must look like 'package.module:function', got {loop.entry_point!r}",
                field="data_parallel.train_loop.entry_point",
            )
        # "train" is the default name to split, whether or not a run has such a dataset.
        unknown = sorted(set(request.data_parallel.data_config.datasets_to_split) - set(datasets) - {"train"})
        if unknown:
            raise InvalidArgumentError(
                f"datasets_to_split names {', '.join(map(repr, unknown))}, not among the run's datasets "
                f"({', '.join(sorted(datasets)) or 'none'})",
                field="data_parallel.data_config.datasets_to_split",
            )
