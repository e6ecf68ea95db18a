"""``ExperimentAnalysis``, as ``ray.tune.ExperimentAnalysis``: what ``tune.run`` returns.

It reads the search's trials through a ``ResultGrid`` (the coordinator's record of the search
and its trial runs), so the best trial, config, result and checkpoint are the ones
``ResultGrid.get_best_result`` picks.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire.tune.callback import Trial
from trainwire.tune.result_grid import ResultGrid, _number
from trainwire.tune.tune_config import default_metric_mode
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import flatten_metrics
from trainwire_core.v1 import common_pb2

__all__ = ["ExperimentAnalysis"]

logger = logging.getLogger(__name__)

_STATUS = {
    common_pb2.PENDING: "PENDING",
    common_pb2.STARTING: "PENDING",
    common_pb2.RUNNING: "RUNNING",
    common_pb2.RESTARTING: "RUNNING",
    common_pb2.SUCCEEDED: "TERMINATED",
    common_pb2.CANCELLED: "TERMINATED",
    common_pb2.FAILED: "ERROR",
}


def _metric_analysis(history: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per numeric metric: max, min, avg, last, last-5-avg, last-10-avg (Ray's Trial.metric_analysis)."""
    out: dict[str, dict[str, float]] = {}
    keys = {k for row in history for k in row}
    for key in keys:
        values = [v for v in (_number(row.get(key)) for row in history) if v is not None]
        if not values or key in ("done", "timestamp"):
            continue
        out[key] = {
            "max": max(values),
            "min": min(values),
            "avg": sum(values) / len(values),
            "last": values[-1],
            "last-5-avg": sum(values[-5:]) / len(values[-5:]),
            "last-10-avg": sum(values[-10:]) / len(values[-10:]),
        }
    return out


class ExperimentAnalysis:
    """A search's trials and their results, as ``ray.tune.ExperimentAnalysis``.

    Args:
        experiment_checkpoint_path: The search's id or name (or a path or URI ending with it): the
            search is read from the coordinator.
        storage_filesystem: Accepted for Ray's signature; must be None (the search is in the coordinator).
        trials: Accepted for Ray's signature; the trials are the search's.
        default_metric: The metric ``best_*`` compare by (default: the search's).
        default_mode: "min" or "max" (default: the search's).
        result_grid: The search's ResultGrid, when the caller has it (``tune.run`` does).
    """

    def __init__(
        self,
        experiment_checkpoint_path: str | os.PathLike,
        *,
        storage_filesystem: Any = None,
        trials: list[Trial] | None = None,
        default_metric: str | None = None,
        default_mode: str | None = None,
        result_grid: ResultGrid | None = None,
    ) -> None:
        if storage_filesystem is not None:
            raise InvalidArgumentError(
                "storage_filesystem cannot be given: a search's results are read from the coordinator",
                field="storage_filesystem",
            )
        if result_grid is None:
            from trainwire.session_client import get_client
            from trainwire.tune.tuner import Tuner

            client = get_client()
            result_grid = ResultGrid(client.get_tune(Tuner._tune_ref(str(experiment_checkpoint_path))), client)
        if default_mode and default_mode not in ("min", "max"):
            raise ValueError("`default_mode` has to be None or one of [min, max]")
        self._grid = result_grid
        metric, mode = default_metric_mode(result_grid.tune_run.request.tune_config)
        self.default_metric = default_metric or metric or None
        self.default_mode = default_mode or mode or None
        self.trials = self._load_trials()

    def _load_trials(self) -> list[Trial]:
        out = []
        for index, proto in enumerate(self._grid.tune_run.trials):
            result = self._grid[index]
            history = self._grid.history(index)
            last = dict(history[-1]) if history else dict(result.metrics)
            error = proto.state_reason if proto.state == common_pb2.FAILED else ""
            if proto.run_id:
                last.setdefault("trial_id", proto.run_id)
            last.setdefault("config", result.config)
            out.append(
                Trial(
                    trial_id=proto.run_id,
                    index=proto.index,
                    config=result.config,
                    status=_STATUS.get(proto.state, "PENDING"),
                    last_result=last,
                    error_msg=error,
                    checkpoint=result.checkpoint,
                    path=result.path,
                    metric_analysis=_metric_analysis(history),
                )
            )
        return out

    # --- the experiment --------------------------------------------------------------
    @property
    def experiment_path(self) -> str:
        """The search's id (``ExperimentAnalysis`` and ``Tuner.restore`` take it)."""
        return self._grid.experiment_path

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Each trial's last result, by trial id."""
        return {str(t): t.last_result for t in self.trials}

    @property
    def results_df(self) -> pd.DataFrame:
        """The trials' last results, one row each (flat "a/b" columns), indexed by trial id."""
        rows = [
            {
                **flatten_metrics({k: v for k, v in t.last_result.items() if k != "config"}),
                **flatten_metrics({"config": t.config}),
                "trial_id": str(t),
            }
            for t in self.trials
        ]
        if not rows:
            return pd.DataFrame()
        return pd.DataFrame.from_records(rows, index="trial_id")

    @property
    def trial_dataframes(self) -> dict[str, pd.DataFrame]:
        """Each trial's every result (a row per report), by trial id."""
        return {str(t): pd.DataFrame(self._grid.history(t.index)) for t in self.trials}

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> pd.DataFrame:
        """One row per trial: its last result, or with ``metric`` and ``mode`` its best one.

        Raises:
            ValueError: ``metric`` without ``mode``, or a mode other than "min" / "max".
        """
        if mode and mode not in ("min", "max"):
            raise ValueError("If set, `mode` has to be one of [min, max]")
        if mode and not metric:
            raise ValueError(
                "If a `mode` is passed to `ExperimentAnalysis.dataframe(), you'll also have to pass a `metric`!"
            )
        if metric and not mode:
            mode = self.default_mode
            if not mode:
                raise ValueError("If a `metric` is passed, a `mode` is needed (or a default_mode).")
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict[str, Any]]:
        """Each trial's config by trial id (``prefix``: flat, keys as "config/a/b")."""
        if prefix:
            return {str(t): flatten_metrics({"config": t.config}) for t in self.trials}
        return {str(t): t.config for t in self.trials}

    # --- the best trial ---------------------------------------------------------------
    def _validate_metric(self, metric: str | None) -> str:
        if not metric and not self.default_metric:
            raise ValueError(
                "No `metric` has been passed and  `default_metric` has not been set. Please specify the `metric` "
                "parameter."
            )
        return metric or self.default_metric  # type: ignore[return-value]

    def _validate_mode(self, mode: str | None) -> str:
        if not mode and not self.default_mode:
            raise ValueError(
                "No `mode` has been passed and  `default_mode` has not been set. Please specify the `mode` parameter."
            )
        if mode and mode not in ("min", "max"):
            raise ValueError("If set, `mode` has to be one of [min, max]")
        return mode or self.default_mode  # type: ignore[return-value]

    def get_best_trial(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Trial | None:
        """The best trial by ``metric`` (each trial's last result, or its ``scope``); None when no trial reported it.

        Raises:
            ValueError: No metric or mode (none given and no default), or an unknown scope.
        """
        if scope not in ("all", "last", "avg", "last-5-avg", "last-10-avg"):
            raise ValueError(
                f"ExperimentAnalysis: attempting to get best trial for metric {metric} for scope {scope} "
                'not in ["all", "last", "avg", "last-5-avg", "last-10-avg"]. If you didn\'t pass a `metric` '
                "parameter to `tune.run()`, you have to pass one when fetching the best trial."
            )
        metric, mode = self._validate_metric(metric), self._validate_mode(mode)
        try:
            index = self._grid.best_index(metric, mode, scope, filter_nan_and_inf)
        except RuntimeError:
            logger.warning("Could not find best trial. Did you pass the correct `metric` parameter?")
            return None
        return self.trials[index]

    def get_best_config(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict[str, Any] | None:
        """The best trial's config (as ``get_best_trial``)."""
        best = self.get_best_trial(metric, mode, scope)
        return best.config if best is not None else None

    def _checkpoints(self, trial: Trial) -> list[tuple[Checkpoint, dict[str, Any]]]:
        return list(self._grid[trial.index].best_checkpoints)

    def get_best_checkpoint(
        self, trial: Trial, metric: str | None = None, mode: str | None = None
    ) -> Checkpoint | None:
        """The trial's kept checkpoint with the best ``metric`` in its report (None: no checkpoint has it)."""
        metric, mode = self._validate_metric(metric), self._validate_mode(mode)
        scored = [(c, _number(flatten_metrics(m).get(metric))) for c, m in self._checkpoints(trial)]
        scored = [(c, v) for c, v in scored if v is not None and not math.isnan(v)]
        if not scored:
            logger.error(f"No checkpoints have been found for trial {trial}.")
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cv: cv[1])[0]

    def get_last_checkpoint(
        self, trial: Trial | None = None, metric: str = "training_iteration", mode: str = "max"
    ) -> Checkpoint | None:
        """The trial's (default: the best trial's) checkpoint with the highest ``metric`` (its latest by default)."""
        trial = trial or self.get_best_trial()
        if trial is None:
            return None
        if metric == "training_iteration" and mode == "max":
            return trial.checkpoint
        return self.get_best_checkpoint(trial, metric, mode)

    def _defaults_set(self, what: str) -> None:
        if not self.default_metric or not self.default_mode:
            raise ValueError(
                f"To fetch the `{what}`, pass a `metric` and `mode` parameter to `tune.run()`. Alternatively, use "
                f"the `get_best_trial(metric, mode)` method to set the metric and mode explicitly."
            )

    @property
    def best_trial(self) -> Trial | None:
        """The best trial by the default metric and mode (each trial's last result)."""
        self._defaults_set("best_trial")
        return self.get_best_trial(self.default_metric, self.default_mode)

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The best trial's config."""
        self._defaults_set("best_config")
        return self.get_best_config(self.default_metric, self.default_mode)

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        """The best trial's checkpoint with the best default metric."""
        self._defaults_set("best_checkpoint")
        best = self.best_trial
        return self.get_best_checkpoint(best, self.default_metric, self.default_mode) if best is not None else None

    @property
    def best_dataframe(self) -> pd.DataFrame:
        """Every result of the best trial."""
        self._defaults_set("best_result")
        best = self.best_trial
        return self.trial_dataframes[str(best)] if best is not None else pd.DataFrame()

    @property
    def best_result(self) -> dict[str, Any]:
        """The best trial's last result."""
        self._defaults_set("best_result")
        best = self.best_trial
        return best.last_result if best is not None else {}

    @property
    def best_result_df(self) -> pd.DataFrame:
        """The best trial's last result, as a one-row DataFrame indexed by trial id."""
        self._defaults_set("best_result")
        best = self.best_trial
        if best is None:
            return pd.DataFrame()
        row = {**flatten_metrics({k: v for k, v in best.last_result.items() if k != "config"}), "trial_id": str(best)}
        return pd.DataFrame.from_records([row], index="trial_id")

    def __repr__(self) -> str:
        return f"ExperimentAnalysis<{self.experiment_path}: {len(self.trials)} trials>"
