"""``RayTrainReportCallback`` for ``lightgbm.train`` and ``normalize_pandas_for_lightgbm``, as Ray's."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainwire.checkpoint import Checkpoint
from trainwire.gbdt import GBDTReportCallback, flatten_evals
from trainwire.lightgbm.framework import FRAMEWORK

if TYPE_CHECKING:
    import pandas as pd


def normalize_pandas_for_lightgbm(df: pd.DataFrame) -> pd.DataFrame:
    """Arrow-backed numeric and boolean pandas columns as NumPy-nullable ones, which LightGBM takes.

    ``Dataset.to_pandas()`` keeps Arrow dtypes (``int64[pyarrow]``) that LightGBM's pandas checks
    refuse; other columns are returned as they are.
    """
    import pandas as pd
    import pyarrow as pa

    mapping: dict[Any, str] = {}
    for column, dtype in df.dtypes.items():
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        arrow = dtype.pyarrow_dtype
        if pa.types.is_signed_integer(arrow):
            mapping[column] = f"Int{arrow.bit_width}"
        elif pa.types.is_unsigned_integer(arrow):
            mapping[column] = f"UInt{arrow.bit_width}"
        elif pa.types.is_floating(arrow):
            mapping[column] = f"Float{arrow.bit_width}"
        elif pa.types.is_boolean(arrow):
            mapping[column] = "boolean"
    return df.astype(mapping, copy=False) if mapping else df


class RayReportCallback(GBDTReportCallback):
    """Reports each boosting round's metrics, and the booster as a checkpoint every ``frequency``
    rounds and after the last; subclasses say where to (``train.report`` or ``tune.report``)."""

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
        super().__init__(
            metrics=metrics,
            filename=filename,
            frequency=frequency,
            checkpoint_at_end=checkpoint_at_end,
            results_postprocessing_fn=results_postprocessing_fn,
        )

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """Loads the ``lightgbm.Booster`` a checkpoint of this callback holds.

        Args:
            checkpoint: A checkpoint this callback reported (e.g. ``result.checkpoint``).
            filename: The ``filename`` the callback was given.
        """
        import lightgbm

        with checkpoint.as_directory() as directory:
            return lightgbm.Booster(model_file=os.path.join(directory, filename))

    @staticmethod
    def _get_eval_result(env: Any) -> dict[str, dict[str, Any]]:
        """``{eval: {metric: value}}`` of this round; ``lightgbm.cv``'s entries as ``-mean`` / ``-stdv``."""
        result: dict[str, dict[str, Any]] = {}
        for entry in env.evaluation_result_list:
            data, metric, value = entry[0:3]
            by_metric = result.setdefault(data, {})
            if len(entry) > 4:
                by_metric[f"{metric}-mean"] = value
                by_metric[f"{metric}-stdv"] = entry[4]
            else:
                by_metric[metric] = value
        return result

    def __call__(self, env: Any) -> None:
        report_dict = self._get_report_dict(flatten_evals(self._get_eval_result(env)))
        # frequency=2 with 11 rounds checkpoints after rounds 2, 4, ..., 10 and 11 (the end).
        at_end = self._checkpoint_at_end and env.iteration == env.end_iteration - 1
        due = bool(self._frequency) and (env.iteration + 1) % self._frequency == 0
        if at_end or due:
            self._save_and_report_checkpoint(report_dict, env.model)
        else:
            self._report_metrics(report_dict)


class RayTrainReportCallback(RayReportCallback):
    """Reports metrics and checkpoints from ``lightgbm.train`` in a ``LightGBMTrainer``'s loop.

    Metrics are named ``<eval>-<metric>`` (``"validation-l2"``) unless ``metrics`` renames them;
    rank 0 saves the booster as ``model.txt`` (the file trainwire's LightGBMPredictor and
    predictor service load).

    Args:
        metrics: Metric names to report (a name, a list, or ``{reported_name: lightgbm_name}``);
            default: all.
        filename: The booster's file name in the checkpoint.
        frequency: Checkpoint every this many rounds (0: never during training).
        checkpoint_at_end: Checkpoint after the last round.
        results_postprocessing_fn: Turns the metrics dict into the one reported.
    """

    def _report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        from trainwire import train

        train.report(metrics, checkpoint=checkpoint)
