"""What the gradient-boosting backends share: the declarative form's checks, and the function form.

An XGBoostTrainer or LightGBMTrainer with a ``train_loop_per_worker`` sends a data-parallel spec
(its pickled loop, Ray Data shards, no warm workers: user code ran there); without one, a GBDT
spec (params, label column), read by the workers themselves and run on warm workers.
"""

from __future__ import annotations

from trainwire_coordinator.backends.base import CoordinatorBackend, DataParallelBackend, check_tabular_datasets
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2


def is_function_form(request: coordinator_pb2.FitRequest) -> bool:
    return request.WhichOneof("trainer") == "data_parallel"


class GBDTBackend(CoordinatorBackend):
    """The declarative form's validation, shared by XGBoost and LightGBM.

    Subclasses name ``function_form``: the backend that runs the same framework's training functions.
    """

    spec_field = "gbdt"
    uses_ray_data = False
    reuse_workers = True
    function_form: type[DataParallelBackend] = DataParallelBackend

    def for_request(self, request: coordinator_pb2.FitRequest) -> CoordinatorBackend:
        return self.function_form() if is_function_form(request) else self

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        if is_function_form(request):
            self.function_form().validate(request, datasets)
            return
        super().validate(request, datasets)
        spec = request.gbdt
        check_tabular_datasets(datasets, spec.label_column, "gbdt.label_column")
        if spec.num_boost_round < 1:
            raise InvalidArgumentError(
                f"gbdt.num_boost_round must be >= 1, got {spec.num_boost_round}", field="gbdt.num_boost_round"
            )
