"""What a run is scored by, and what the console draws of it: plain functions over the coordinator's Run.

The score metric is the run's checkpoint score attribute, else its first reported metric. Its
checkpoints are the kept ones the Run lists (best first, and the latest); the served one is the
predictors' default version of the run: the best by the score attribute, else the latest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from trainwire_console.downsample import minmax
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2

# The x axes a chart can have, and the reported metric each one is (drawn against itself it is a line).
X_METRICS = {"training_iteration": "training_iteration", "time": ""}
# Points of a runs-list sparkline at most (two per slice: the lowest and highest report).
SPARK_POINTS = 48


def score_config(run: coordinator_pb2.Run) -> tuple[str, str]:
    """The run's checkpoint score attribute ("" for none) and its order ("max" or "min")."""
    config = run.request.run_config.checkpoint_config
    return config.checkpoint_score_attribute, "min" if config.checkpoint_score_order == "min" else "max"


def score_metric(score_attribute: str, reported: Iterable[str]) -> str:
    """The metric a run is judged by: its score attribute, else the first metric it reported ("" for none)."""
    if score_attribute:
        return score_attribute
    return next((m for m in reported if m not in X_METRICS.values()), "")


def metric_order(reported: Sequence[str], score_attribute: str, x: str) -> list[str]:
    """The metrics a run's charts offer, in the order they are drawn: the score metric first, then
    the others as first reported; never the x axis's own metric."""
    first = score_metric(score_attribute, reported)
    own = X_METRICS.get(x, "")
    rest = [m for m in reported if m != first and m != own]
    return ([first] if first and first != own else []) + rest


def better(order: str) -> Any:
    """``min`` or ``max``: which of two scores the order prefers."""
    return min if order == "min" else max


def best_of(values: Iterable[float], order: str) -> float | None:
    """The best finite value under ``order``; None when there is none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return better(order)(finite) if finite else None


def _score(metrics: dict[str, Any], metric: str) -> float | None:
    value = metrics.get(metric)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def served_checkpoint_id(run: coordinator_pb2.Run) -> str:
    """The checkpoint the predictors serve for the run by default: its best by the score attribute,
    else its latest ("" while it has none)."""
    score_attribute, _ = score_config(run)
    if score_attribute and run.best_checkpoints:
        return run.best_checkpoints[0].checkpoint_id
    return run.latest_checkpoint.checkpoint_id if run.HasField("latest_checkpoint") else ""


def kept_checkpoints(run: coordinator_pb2.Run, metric: str) -> list[dict[str, Any]]:
    """The run's kept checkpoints, oldest first: id, report index, seconds since the run was created,
    their value of ``metric``, and whether each is the best, the latest, the served one."""
    score_attribute, _ = score_config(run)
    checkpoints = {c.checkpoint_id: c for c in run.best_checkpoints}
    if run.HasField("latest_checkpoint"):
        checkpoints.setdefault(run.latest_checkpoint.checkpoint_id, run.latest_checkpoint)
    # Best first, as the coordinator ranks them; only a score attribute makes one "best".
    best = run.best_checkpoints[0].checkpoint_id if score_attribute and run.best_checkpoints else ""
    latest = run.latest_checkpoint.checkpoint_id if run.HasField("latest_checkpoint") else ""
    served = served_checkpoint_id(run)
    created = run.created_at.ToMicroseconds() / 1e6
    out = []
    for c in sorted(checkpoints.values(), key=lambda c: c.index):
        metrics = struct_to_dict(c.metrics)
        at = c.created_at.ToMicroseconds() / 1e6 - created if c.HasField("created_at") else None
        out.append(
            {
                "id": c.checkpoint_id,
                "index": c.index,
                "t": at,
                "value": _score(metrics, metric) if metric else None,
                "best": c.checkpoint_id == best,
                "latest": c.checkpoint_id == latest,
                "served": c.checkpoint_id == served,
            }
        )
    return out


def run_scores(run: coordinator_pb2.Run, reported: Sequence[str] = ()) -> dict[str, Any]:
    """What the console shows of a run's score: the metric, the order, the kept checkpoints, the served one."""
    score_attribute, order = score_config(run)
    reported = list(reported) or sorted(struct_to_dict(run.latest_metrics))
    metric = score_metric(score_attribute, reported)
    return {
        "score_attribute": score_attribute,
        "order": order,
        "metric": metric,
        "served": served_checkpoint_id(run),
        "state": common_pb2.RunState.Name(run.state),
        "checkpoints": kept_checkpoints(run, metric),
    }


def sparkline(
    xs: np.ndarray, ys: np.ndarray, order: str, has_order: bool, points: int = SPARK_POINTS
) -> dict[str, Any]:
    """A metric's history cut to a sparkline: its points, last value, and best value where it has an order."""
    keep = ~np.isnan(ys)
    xs, ys = xs[keep], ys[keep]
    if not len(ys):
        return {"points": [], "last": None, "best": None}
    sx, sy = minmax(xs, ys, max(points // 2, 1))
    return {
        "points": [[float(a), float(b)] for a, b in zip(sx, sy, strict=True)],
        "last": float(ys[-1]),
        "best": float(ys.min() if order == "min" else ys.max()) if has_order else None,
    }
