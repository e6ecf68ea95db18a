"""``RayTrainReportCallback`` for ``xgboost.train``, as ``ray.train.xgboost.RayTrainReportCallback``.

Imports xgboost (the callback is an ``xgboost.callback.TrainingCallback``): ``trainwire.xgboost``
loads this module only when the callback is named.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import xgboost
from xgboost.callback import TrainingCallback

from trainwire.checkpoint import Checkpoint
from trainwire.gbdt import GBDTReportCallback, flatten_evals
from trainwire.xgboost.framework import FRAMEWORK


class RayReportCallback(GBDTReportCallback, TrainingCallback):
    """Reports each boosting round's metrics, and the booster as a checkpoint every ``frequency``
    rounds and at the end; subclasses say where to (``train.report`` or ``tune.report``)."""

    # The framework's model file, so the predictor serves these checkpoints as they are.
    CHECKPOINT_NAME = FRAMEWORK.model_file

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = CHECKPOINT_NAME,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        GBDTReportCallback.__init__(
            self,
            metrics=metrics,
            filename=filename,
            frequency=frequency,
            checkpoint_at_end=checkpoint_at_end,
            results_postprocessing_fn=results_postprocessing_fn,
        )
        # The last round's evaluation log, reported with the checkpoint at the end.
        self._evals_log: Any = None
        # The round last checkpointed, so the end does not checkpoint the same model twice.
        self._last_checkpoint_iteration: int | None = None

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> xgboost.Booster:
        """Loads the booster a checkpoint of this callback holds.

        Args:
            checkpoint: A checkpoint this callback reported (e.g. ``result.checkpoint``).
            filename: The ``filename`` the callback was given.
        """
        with checkpoint.as_directory() as directory:
            booster = xgboost.Booster()
            booster.load_model(os.path.join(directory, filename))
            return booster

    def _get_report_dict(self, evals_log: Any) -> dict[str, Any]:  # type: ignore[override]
        # The latest value of each metric (xgboost keeps every round's).
        flat = {key: values[-1] for key, values in flatten_evals(evals_log).items()}
        return GBDTReportCallback._get_report_dict(self, flat)

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        self._evals_log = evals_log
        report_dict = self._get_report_dict(evals_log)
        # frequency=2 checkpoints after rounds 2, 4, ... (epochs 1, 3, ... counted from 0).
        if self._frequency and (epoch + 1) % self._frequency == 0:
            self._last_checkpoint_iteration = epoch
            self._save_and_report_checkpoint(report_dict, model)
        else:
            self._report_metrics(report_dict)
        return False

    def after_training(self, model: Any) -> Any:
        if not self._checkpoint_at_end:
            return model
        if (
            self._last_checkpoint_iteration is not None
            and model.num_boosted_rounds() - 1 == self._last_checkpoint_iteration
        ):
            return model  # the last round was checkpointed already
        report_dict = self._get_report_dict(self._evals_log) if self._evals_log else {}
        self._save_and_report_checkpoint(report_dict, model)
        return model


class RayTrainReportCallback(RayReportCallback):
    """Reports metrics and checkpoints from ``xgboost.train`` in an ``XGBoostTrainer``'s loop.

    Metrics are named ``<eval>-<metric>`` (``"validation-rmse"``) unless ``metrics`` renames
    them; rank 0 saves the booster as ``model.ubj`` (the file trainwire's XGBoostPredictor and
    predictor service load).

    Args:
        metrics: Metric names to report (a name, a list, or ``{reported_name: xgboost_name}``);
            default: all.
        filename: The booster's file name in the checkpoint.
        frequency: Checkpoint every this many rounds (0: never during training).
        checkpoint_at_end: Checkpoint after the last round.
        results_postprocessing_fn: Turns the metrics dict into the one reported.

    Example::

        xgboost.train(params, dtrain, evals=[(deval, "validation")],
                      callbacks=[RayTrainReportCallback(frequency=10)])
        ...
        booster = RayTrainReportCallback.get_model(trainer.fit().checkpoint)
    """

    def _report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        from trainwire import train

        train.report(metrics, checkpoint=checkpoint)
