"""``SklearnTrainer``: one estimator on one worker, cross-validation included."""

from __future__ import annotations

from typing import Any

from trainwire.runtime_env import pickle_by_value
from trainwire.sklearn.checkpoint import SklearnCheckpoint
from trainwire.sklearn.framework import FRAMEWORK
from trainwire.trainer import BaseTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2


class SklearnTrainer(BaseTrainer):
    """Fits ``estimator`` on the "train" dataset; scores the others; optional CV.

    Args:
        estimator: An unfitted scikit-learn estimator.
        label_column: The label column.
        cv: Number of cross-validation folds (None: no CV).
        scoring: Scorer name(s) for CV.
        return_train_score_cv: Also score the training folds.
        parallelize_cv: joblib jobs for CV (default: the worker's CPUs).
    """

    framework = FRAMEWORK.name
    checkpoint_cls = SklearnCheckpoint

    def __init__(
        self,
        *,
        estimator: Any,
        label_column: str,
        cv: int | None = None,
        scoring: str | list[str] | None = None,
        return_train_score_cv: bool = False,
        parallelize_cv: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not hasattr(estimator, "fit"):
            raise InvalidArgumentError("estimator must be a scikit-learn estimator", field="sklearn.estimator")
        if cv is not None and (not isinstance(cv, int) or cv < 2):
            raise InvalidArgumentError(f"cv must be an integer >= 2, got {cv!r}", field="sklearn.cv")
        self.estimator = estimator
        self.label_column = label_column
        self.cv = cv or 0
        self.scoring = [scoring] if isinstance(scoring, str) else list(scoring or [])
        self.return_train_score_cv = return_train_score_cv
        self.parallelize_cv = parallelize_cv or 0

    def _code_objects(self) -> list:
        return [self.estimator, *super()._code_objects()]

    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        request.sklearn.CopyFrom(
            coordinator_pb2.SklearnSpec(
                pickled_estimator=pickle_by_value(self.estimator),
                label_column=self.label_column,
                cv=self.cv,
                scoring=self.scoring,
                return_train_score_cv=self.return_train_score_cv,
                parallelize_cv=self.parallelize_cv,
            )
        )
