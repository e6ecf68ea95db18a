"""What XGBoost and LightGBM share: the declarative trainer, and predictors that may score with a compiled forest."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.errors import InvalidArgumentError
from trainwire.structs import to_struct
from trainwire.trainer import BaseTrainer
from trainwire.v1 import coordinator_pb2


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


class CompiledTreesMixin:
    """A tree-model Predictor that scores with a compiled forest once one is set.

    The predictor service compiles boosters (``trainwire_predictor.compiled_trees``)
    and hands the result to ``use_compiled``; until then, and for any call with
    framework-specific predict arguments, the framework's own predict scores.
    The compiled object needs ``predict(data: np.ndarray) -> np.ndarray``.
    """

    compiled: Any = None

    def use_compiled(self, compiled: Any) -> None:
        """Scores with ``compiled`` from now on (None: the framework's predict again)."""
        self.compiled = compiled

    def framework_predict(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        """The framework's own predict on a 2-D array, compiled forest or not."""
        raise NotImplementedError

    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        compiled = self.compiled
        if compiled is not None and not kwargs:
            return compiled.predict(data)
        return self.framework_predict(data, **kwargs)
