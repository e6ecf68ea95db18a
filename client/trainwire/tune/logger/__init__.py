"""``ray.tune.logger``: ``LoggerCallback``, the base of experiment-level loggers, and ``pretty_print``.

A ``LoggerCallback`` is a ``tune.Callback`` whose hooks call ``log_trial_start``,
``log_trial_result``, ``log_trial_end`` ... as Ray's do; it runs in this program, fed by the
search's event stream (see ``trainwire.tune.callback``). Ray's file loggers (JSON, CSV,
TensorBoardX) write each trial's results beside it on the node; trainwire's coordinator keeps every
result (``ResultGrid``, ``get_dataframe()``), so they are not here.
"""

from __future__ import annotations

import json
from typing import Any

from trainwire.tune.callback import Callback, Trial

__all__ = ["LoggerCallback", "pretty_print"]


class LoggerCallback(Callback):
    """Base class for experiment-level logger callbacks, as ``ray.tune.logger.LoggerCallback``."""

    def log_trial_start(self, trial: Trial) -> None:
        """A trial started."""

    def log_trial_restore(self, trial: Trial) -> None:
        """A trial restored from a checkpoint."""

    def log_trial_save(self, trial: Trial) -> None:
        """A trial saved a checkpoint."""

    def log_trial_result(self, iteration: int, trial: Trial, result: dict) -> None:
        """A trial reported ``result``."""

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        """A trial ended (``failed``: it raised)."""

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.log_trial_end(trial, failed=True)


def pretty_print(result: dict[str, Any], exclude: set[str] | None = None) -> str:
    """A result as YAML without its config (Ray's ``pretty_print``); JSON where PyYAML is absent."""
    out = {
        k: v
        for k, v in result.items()
        if k not in ("config", "hist_stats") and v is not None and (exclude is None or k not in exclude)
    }
    cleaned = json.loads(json.dumps(out, default=str))  # what JSON cannot hold, as its str()
    try:
        import yaml
    except ImportError:
        return json.dumps(cleaned, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump(cleaned, default_flow_style=False)
