"""One line per change of a search: a trial's state, or the best trial (the Tuner and ``trainwire tunes watch``)."""

from __future__ import annotations

import json
from typing import Any

from trainwire.tune.tune_config import default_metric_mode
from trainwire_core.structs import flatten_metrics, struct_to_dict
from trainwire_core.v1 import common_pb2, tune_pb2


def _short(values: dict[str, Any]) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={json.dumps(v)}" for k, v in flatten_metrics(values).items()
    )


def best_text(tune: tune_pb2.TuneRun) -> str:
    """``trial 3 loss=0.12``, or "" while no trial has reported the search's metric."""
    if tune.best_trial < 0 or tune.best_trial >= len(tune.trials):
        return ""
    trial = tune.trials[tune.best_trial]
    metric, _ = default_metric_mode(tune.request.tune_config)
    value = f" {metric or 'metric'}={trial.best_metric:.6g}" if trial.HasField("best_metric") else ""
    return f"trial {trial.index}{value}"


def describe_changes(previous: tune_pb2.TuneRun | None, current: tune_pb2.TuneRun) -> list[str]:
    """The lines that tell what changed from ``previous`` to ``current`` (every trial when ``previous`` is None)."""
    lines: list[str] = []
    before = {t.index: t for t in previous.trials} if previous is not None else {}
    metric, _ = default_metric_mode(current.request.tune_config)
    for trial in current.trials:
        old = before.get(trial.index)
        if old is not None and old.state == trial.state:
            continue
        state = common_pb2.RunState.Name(trial.state)
        parts = [f"[{current.name}] trial {trial.index} {state}"]
        if trial.run_id:
            parts.append(f"(run {trial.run_id})")
        if trial.state_reason:
            parts.append(f"- {trial.state_reason}")
        if old is None or old.state == common_pb2.PENDING:
            parts.append(_short(struct_to_dict(trial.config)))
        if trial.state in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED):
            last = flatten_metrics(struct_to_dict(trial.last_result))
            if metric and metric in last:
                parts.append(_short({metric: last[metric]}))
        lines.append(" ".join(p for p in parts if p))
    best = best_text(current)
    if best and best != (best_text(previous) if previous is not None else ""):
        lines.append(f"[{current.name}] best: {best}")
    if previous is None or previous.state != current.state:
        reason = f" - {current.state_reason}" if current.state_reason else ""
        lines.append(f"[{current.name}] search {common_pb2.RunState.Name(current.state)}{reason}")
    return lines
