"""``ray.tune.integration.keras``: the Keras callback that reports a trial's metrics and checkpoints to Tune.

Importing this module imports TensorFlow. ``TuneReportCheckpointCallback`` is
``trainwire.tensorflow.keras.ReportCheckpointCallback`` (a trial's ``tune.report`` is
``train.report``); ``TuneReportCallback`` raises, as Ray 2.60's deprecated one does.
"""

from __future__ import annotations

from typing import Any

from trainwire.tensorflow.keras import ReportCheckpointCallback

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]

_DEPRECATION_MESSAGE = (
    "The `ray.tune.integration.keras` module is deprecated in favor of "
    "`ray.train.tensorflow.keras.ReportCheckpointCallback`."
)


class TuneReportCallback:
    """Deprecated in Ray: use ``TuneReportCheckpointCallback`` (or ``trainwire.tensorflow.keras``'s)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise DeprecationWarning(_DEPRECATION_MESSAGE)


class TuneReportCheckpointCallback(ReportCheckpointCallback):
    """Reports Keras logs, and a checkpoint of the model, to the trial (as Ray's).

    Args:
        checkpoint_on: Hook(s) at which to report a checkpoint too (default "epoch_end").
        report_metrics_on: Hook(s) at which to report metrics (default "epoch_end").
        metrics: Which logs to report: None (all), a key, a list of keys, or a dict of name -> log key.
    """
