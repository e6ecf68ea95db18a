"""``Result``: what ``Trainer.fit()`` returns, as in ``ray.train.Result``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2

if TYPE_CHECKING:
    import pyarrow.fs


_ENDED = (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED)


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
        metrics_dataframe: Every report of rank 0, one row each (None when the Result was built without it).
        best_checkpoints: (checkpoint, metrics) pairs, best first.
        return_value: What rank 0's ``train_loop_per_worker`` returned, or None (it returned None, the run
            did not succeed, or its framework runs no loop), as Ray 2.60's ``Result.return_value``. The
            worker pickles it (cloudpickle) into the run's directory; it is unpickled here, in the SDK's
            process only, when the Result is built.
        run_id: The run's id; ``name`` its name; ``state`` its final state.
        config: A search trial's parameters, keyed like the Tuner's param_space (else empty).
    """

    metrics: dict[str, Any]
    checkpoint: Checkpoint | None
    error: WorkerFailure | None
    path: str
    metrics_dataframe: pd.DataFrame | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    return_value: Any = None
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
        frame = self.metrics_dataframe if self.metrics_dataframe is not None else pd.DataFrame()
        rows = [(i + 1, 0.0, row) for i, row in enumerate(frame.to_dict("records"))]
        return plot_histories([RunHistory(self.name or self.run_id, rows)], path, metrics)

    @property
    def filesystem(self) -> pyarrow.fs.FileSystem:
        """The filesystem that holds ``path`` (the shared store's: local, or S3), as Ray's ``Result.filesystem``."""
        import pyarrow.fs

        if not self.path:
            return pyarrow.fs.LocalFileSystem()
        return pyarrow.fs.FileSystem.from_uri(self.path)[0]

    @classmethod
    def from_path(cls, path: str | os.PathLike, storage_filesystem: pyarrow.fs.FileSystem | None = None) -> Result:
        """The Result of a run, from its directory in the shared store (a Result's ``path``), as Ray's.

        A run's directory is named by its id; the run, its reports and its checkpoints are read from the
        coordinator the session talks to (``trainwire.init``), which keeps them.

        Args:
            path: The run's directory: ``Result.path`` (a store URI), or the same without its scheme.
            storage_filesystem: Accepted for Ray's signature; the store is the coordinator's.

        Raises:
            NotFoundError: No run of that id.
        """
        from trainwire.session_client import get_client

        location = os.fspath(path).split("?", 1)[0].rstrip("/")
        run_id = location.rsplit("/", 1)[-1]
        client = get_client()
        client.get_run(run_id)  # NOT_FOUND before anything is watched
        history: list[dict[str, Any]] = []
        for event in client.watch_run(run_id):  # the whole history; a run still going is followed to its end
            kind = event.WhichOneof("kind")
            if kind == "metrics":
                history.append(struct_to_dict(event.metrics.metrics))
            elif kind == "state_change" and event.state_change.state in _ENDED:
                break
        return cls.from_run(client.get_run(run_id), history)

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
            # Ray gives the return value of a run that completed only.
            return_value=read_return_value(run.path) if run.state == common_pb2.SUCCEEDED else None,
        )


def read_return_value(run_path: str) -> Any:
    """Unpickles rank 0's return value from a run's directory (``return_value.pkl``), or None when absent.

    The file is the worker's cloudpickle of the loop's return; reading it here runs its code in the
    user's own process, which sent the loop, never in a service.
    """
    if not run_path:
        return None
    import cloudpickle
    import pyarrow.fs as pafs

    from trainwire_core.storage import RETURN_VALUE_NAME, resolve

    fs, root = resolve(run_path)
    path = f"{root.rstrip('/')}/{RETURN_VALUE_NAME}"
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return cloudpickle.loads(f.read())
