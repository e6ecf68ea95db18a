"""What every experiment tracker takes from a run: flat params, numeric metrics and their step, the model.

Shared by the SDK's tracker callbacks and the coordinator's own tracking, so a run logs
the same names and steps whichever of them records it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainwire_core.structs import flatten_metrics

if TYPE_CHECKING:
    from trainwire.checkpoint import Checkpoint
    from trainwire.result import Result

# MLflow's limits on a param (longer keys are refused, longer values cut).
MAX_PARAM_KEY = 250
MAX_PARAM_VALUE = 6000


def numeric_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Every finite number among ``metrics`` (nested ones flattened); lists, strings and bools are left out."""
    out: dict[str, float] = {}
    for key, value in flatten_metrics(dict(metrics)).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def params(config: Mapping[str, Any]) -> dict[str, str]:
    """The run's config as tracker params: flat, each value as text (cut to MLflow's limit)."""
    return {k[:MAX_PARAM_KEY]: str(v)[:MAX_PARAM_VALUE] for k, v in flatten_metrics(dict(config)).items()}


def step_of(metrics: Mapping[str, Any], report_index: int) -> int:
    """A report's step: its ``training_iteration`` when it has one, else the report's index (1-based)."""
    iteration = metrics.get("training_iteration")
    if isinstance(iteration, int) and not isinstance(iteration, bool):
        return iteration
    return report_index


def model_checkpoint(result: Result) -> Checkpoint | None:
    """The checkpoint a tracker keeps as the run's model: the best by the score attribute, else the latest."""
    if result.best_checkpoints:
        return result.best_checkpoints[0][0]
    return result.checkpoint


def mlflow_status(state: str) -> str:
    """The MLflow run status of a trainwire run's final state."""
    return {"SUCCEEDED": "FINISHED", "CANCELLED": "KILLED"}.get(state, "FAILED")
