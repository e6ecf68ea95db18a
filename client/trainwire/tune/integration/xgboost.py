"""``ray.tune.integration.xgboost``: report ``xgboost.train``'s rounds from a Tune trial."""

from __future__ import annotations

from typing import Any, NoReturn

from trainwire.checkpoint import Checkpoint
from trainwire.xgboost.callbacks import RayReportCallback

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


class TuneReportCheckpointCallback(RayReportCallback):
    """Reports each round's metrics to Tune, and the booster as a checkpoint, as Ray's.

    Usable in a function trainable and in an ``XGBoostTrainer``'s training function (rank 0
    saves the booster there). Load it with ``TuneReportCheckpointCallback.get_model(checkpoint)``.

    Args:
        metrics: Metric names to report (a name, a list, or ``{reported_name: xgboost_name}``,
            e.g. ``{"loss": "eval-logloss"}``); default: all, named ``<eval>-<metric>``.
        filename: The booster's file name in the checkpoint (default ``model.ubj``).
        frequency: Checkpoint every this many rounds (0: never during training).
        checkpoint_at_end: Checkpoint after the last round.
        results_postprocessing_fn: Turns the metrics dict into the one reported (e.g. averages
            over ``xgboost.cv``'s folds).
    """

    def _report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        from trainwire import tune

        tune.report(metrics, checkpoint=checkpoint)


class TuneReportCallback:
    """Deprecated, as in Ray 2.60: use ``TuneReportCheckpointCallback``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise DeprecationWarning(
            "`TuneReportCallback` is deprecated. "
            "Use `trainwire.tune.integration.xgboost.TuneReportCheckpointCallback` instead."
        )
