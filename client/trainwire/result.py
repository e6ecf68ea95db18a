"""``Result``: what ``Trainer.fit()`` returns, as in ``ray.train.Result``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2


@dataclass
class WorkerFailure:
    """An error raised on a worker: the rank, the exception type, message and traceback."""

    world_rank: int
    exc_type: str
    message: str
    traceback: str

    def __str__(self) -> str:
        return f"rank {self.world_rank} raised {self.exc_type}: {self.message}\n{self.traceback}"

    @classmethod
    def from_proto(cls, msg: common_pb2.WorkerError) -> WorkerFailure:
        return cls(msg.world_rank, msg.exc_type, msg.message, msg.traceback)


@dataclass
class Result:
    """The outcome of a run.

    Attributes:
        metrics: The last metrics rank 0 reported.
        checkpoint: The latest committed checkpoint, or None.
        error: The worker error that ended the run, or None.
        path: URI of the run's directory in the shared store.
        metrics_dataframe: Every report of rank 0, one row each.
        best_checkpoints: (checkpoint, metrics) pairs, best first.
        run_id: The run's id; ``name`` its name; ``state`` its final state.
        config: A search trial's parameters, keyed like the Tuner's param_space (else empty).
    """

    metrics: dict[str, Any]
    checkpoint: Checkpoint | None
    error: WorkerFailure | None
    path: str
    metrics_dataframe: pd.DataFrame
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    run_id: str = ""
    name: str = ""
    state: str = ""
    config: dict[str, Any] = field(default_factory=dict)

    def plot(self, path: str, metrics: list[str] | None = None) -> str:
        """Writes a PNG of this run's metric curves against the training iteration (needs matplotlib).

        Args:
            path: Where the PNG goes.
            metrics: The metrics to draw (default: every numeric one).

        Returns:
            The path written.
        """
        from trainwire.plotting import RunHistory, plot_histories

        # Row i is report i + 1 (a metric missing from a report is NaN there, and skipped).
        rows = [(i + 1, 0.0, row) for i, row in enumerate(self.metrics_dataframe.to_dict("records"))]
        return plot_histories([RunHistory(self.name or self.run_id, rows)], path, metrics)

    @classmethod
    def from_run(
        cls,
        run: coordinator_pb2.Run,
        history: list[dict[str, Any]],
        checkpoint_cls: type[Checkpoint] = Checkpoint,
    ) -> Result:
        latest = run.latest_checkpoint if run.HasField("latest_checkpoint") else None
        return cls(
            metrics=struct_to_dict(run.latest_metrics),
            checkpoint=checkpoint_cls._of_run(latest.uri) if latest else None,
            error=WorkerFailure.from_proto(run.error) if run.HasField("error") else None,
            path=run.path,
            metrics_dataframe=pd.json_normalize(history, sep="/") if history else pd.DataFrame(),
            best_checkpoints=[(checkpoint_cls._of_run(c.uri), struct_to_dict(c.metrics)) for c in run.best_checkpoints],
            run_id=run.run_id,
            name=run.name,
            state=common_pb2.RunState.Name(run.state),
        )
