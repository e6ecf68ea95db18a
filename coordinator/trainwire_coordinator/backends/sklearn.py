"""scikit-learn: one worker (cross-validation in its process); what the coordinator checks."""

from __future__ import annotations

from trainwire.sklearn.framework import FRAMEWORK
from trainwire_coordinator.backends.base import CoordinatorBackend, check_tabular_datasets
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2, coordinator_pb2


class SklearnBackend(CoordinatorBackend):
    name = FRAMEWORK.name
    spec_field = "sklearn"
    uses_ray_data = False
    reuse_workers = True

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        spec = request.sklearn
        if request.scaling_config.num_workers > 1:
            raise InvalidArgumentError(
                "SklearnTrainer trains on one worker; set scaling_config.num_workers=1 "
                "(use trainer_resources for more CPUs)",
                field="scaling_config.num_workers",
            )
        if spec.WhichOneof("estimator") is None:
            raise InvalidArgumentError("sklearn.estimator is required", field="sklearn.estimator")
        check_tabular_datasets(datasets, spec.label_column, "sklearn.label_column")

    def placement_scaling(self, request: coordinator_pb2.FitRequest) -> common_pb2.ScalingConfig:
        """The one worker is the trainer (as Ray's trainer actor): ``trainer_resources`` is what it reserves."""
        scaling = request.scaling_config
        if not any(v > 0 for v in scaling.trainer_resources.values()):
            return scaling
        placed = common_pb2.ScalingConfig()
        placed.CopyFrom(scaling)
        placed.resources_per_worker.clear()
        placed.resources_per_worker.update(scaling.trainer_resources)
        placed.trainer_resources.clear()
        return placed
