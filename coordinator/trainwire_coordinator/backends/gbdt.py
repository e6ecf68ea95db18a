"""What the declarative gradient-boosting backends check: params, label column, datasets."""

from __future__ import annotations

from trainwire_coordinator.backends.base import CoordinatorBackend, check_tabular_datasets
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2


class GBDTBackend(CoordinatorBackend):
    """Validation shared by XGBoost and LightGBM."""

    spec_field = "gbdt"
    uses_ray_data = False
    reuse_workers = True

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        spec = request.gbdt
        check_tabular_datasets(datasets, spec.label_column, "gbdt.label_column")
        if spec.num_boost_round < 1:
            raise InvalidArgumentError(
                f"gbdt.num_boost_round must be >= 1, got {spec.num_boost_round}", field="gbdt.num_boost_round"
            )
