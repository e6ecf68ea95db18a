"""Metric curves of runs as a PNG (``trainwire runs plot``, ``Result.plot``), drawn with matplotlib.

matplotlib is an optional extra (``pip install trainwire[plot]``): it is imported only when a plot is
drawn, so ``import trainwire`` stays light.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainwire_core.structs import flatten_metrics, struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2

if TYPE_CHECKING:
    from trainwire.client import CoordinatorClient

X_AXES = ("training_iteration", "time")
# Pixels of the figure: one row of this height per metric.
WIDTH_PX, ROW_HEIGHT_PX, DPI = 1000, 300, 100
# A live run's stream is followed until it has caught up, or until it has been quiet this long.
_QUIET_S = 1.0
# The streams of ended runs end by themselves.
_ENDED = frozenset({common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED})


@dataclass
class RunHistory:
    """A run's reports: ``rows`` of (report index, seconds since the run was created, metrics)."""

    label: str
    rows: list[tuple[int, float, dict[str, Any]]] = field(default_factory=list)

    def series(self, metric: str, x: str = "training_iteration") -> tuple[list[float], list[float]]:
        """The (x, y) points of one numeric metric; reports without it are skipped."""
        xs, ys = [], []
        for index, seconds, metrics in self.rows:
            value = metrics.get(metric)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            xs.append(float(index) if x == "training_iteration" else seconds)
            ys.append(float(value))
        return xs, ys


def numeric_metrics(histories: Iterable[RunHistory]) -> list[str]:
    """Names of the metrics that hold a number in some report, in the order first seen."""
    seen: dict[str, None] = {}
    for history in histories:
        for _, _, metrics in history.rows:
            for key, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    seen.setdefault(key, None)
    return list(seen)


def fetch_history(client: CoordinatorClient, run: str) -> RunHistory:
    """A run's reports so far, from the coordinator (GetRun, then WatchRunBatched from the first event).

    A run still going is read until its last report has arrived (or its stream has been quiet
    for a second): the plot shows it as it is now, and does not wait for it to end.
    """
    info = client.get_run(run)
    created = info.created_at.ToDatetime().timestamp()
    history = RunHistory(f"{info.name} ({info.run_id})")
    stream = client.stub.WatchRunBatched(coordinator_pb2.WatchRunRequest(run_id=info.run_id), metadata=client._metadata)
    timer: threading.Timer | None = None

    def arm() -> None:
        nonlocal timer
        if timer is not None:
            timer.cancel()
        timer = threading.Timer(_QUIET_S, stream.cancel)
        timer.daemon = True
        timer.start()

    import grpc

    from trainwire_core.grpc_status import from_rpc_error

    arm()
    try:
        for event in (event for batch in stream for event in batch.events):
            arm()
            if event.WhichOneof("kind") != "metrics":
                continue
            seconds = event.time.ToDatetime().timestamp() - created
            history.rows.append(
                (event.metrics.report_index, seconds, flatten_metrics(struct_to_dict(event.metrics.metrics)))
            )
            if event.metrics.report_index >= info.last_report_index > 0 and info.state not in _ENDED:
                break
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            raise from_rpc_error(err) from None
    finally:
        if timer is not None:
            timer.cancel()
        stream.cancel()
    return history


def plot_histories(
    histories: Sequence[RunHistory],
    path: str | os.PathLike,
    metrics: Sequence[str] | None = None,
    x: str = "training_iteration",
) -> str:
    """Writes a PNG with one panel per metric and one line per run.

    Args:
        histories: The runs to draw (their curves overlaid in each panel).
        path: Where the PNG goes.
        metrics: The metrics to draw (default: every numeric one).
        x: ``training_iteration`` (the report index) or ``time`` (seconds since the run was created).

    Returns:
        The path written.

    Raises:
        ValueError: An unknown ``x``, or no numeric metric to draw.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    names = list(metrics) if metrics else numeric_metrics(histories)
    if not names:
        raise ValueError("no numeric metric to plot (the runs have reported none yet)")
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib.figure import Figure

    # A Figure of its own (not pyplot): nothing global, safe from threads.
    fig = Figure(figsize=(WIDTH_PX / DPI, ROW_HEIGHT_PX * len(names) / DPI), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(names), 1, squeeze=False)[:, 0]
    for ax, metric in zip(axes, names, strict=True):
        for history in histories:
            xs, ys = history.series(metric, x)
            if xs:
                ax.plot(xs, ys, marker="." if len(xs) < 50 else None, linewidth=1.5, label=history.label)
        ax.set_title(metric)
        ax.set_xlabel("training iteration" if x == "training_iteration" else "seconds since start")
        ax.grid(True, alpha=0.3)
        if len(histories) > 1:
            ax.legend(fontsize="small")
    fig.savefig(path, format="png")
    return str(path)
