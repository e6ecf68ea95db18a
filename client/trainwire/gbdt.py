"""What XGBoost and LightGBM share: the declarative trainer."""

from __future__ import annotations

from typing import Any

from trainwire.trainer import BaseTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import coordinator_pb2


class GBDTTrainer(BaseTrainer):
    """Trains a boosted-tree model data-parallel; no training code needed.

    Args:
        params: The library's training params.
        label_column: Name of the label column in every dataset.
        num_boost_round: Boosting rounds.
        dmatrix_params: Extra arguments of the library's dataset constructor.
        **kwargs: ``scaling_config``, ``run_config``, ``datasets``, ... of BaseTrainer.
    """

    def __init__(
        self,
        *,
        params: dict[str, Any],
        label_column: str,
        num_boost_round: int = 10,
        dmatrix_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not label_column:
            raise InvalidArgumentError("label_column is required", field="gbdt.label_column")
        if not isinstance(num_boost_round, int) or num_boost_round < 1:
            raise InvalidArgumentError(
                f"num_boost_round must be an integer >= 1, got {num_boost_round!r}",
                field="gbdt.num_boost_round",
            )
        self.params = params
        self.label_column = label_column
        self.num_boost_round = num_boost_round
        self.dmatrix_params = dmatrix_params or {}

    def _total_iterations(self) -> int:
        return self.num_boost_round

    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        request.gbdt.CopyFrom(
            coordinator_pb2.GBDTSpec(
                params=to_struct(self.params, "gbdt.params"),
                label_column=self.label_column,
                num_boost_round=self.num_boost_round,
                dmatrix_params=to_struct(self.dmatrix_params, "gbdt.dmatrix_params"),
            )
        )
