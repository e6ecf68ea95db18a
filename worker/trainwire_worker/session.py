"""The worker's implementation of the ``trainwire.train`` session."""

from __future__ import annotations

from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.train.context import TrainContext, TrainSession
from trainwire_core.datasets import ShardSpec
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import Store
from trainwire_core.structs import metrics_to_struct
from trainwire_core.v1 import common_pb2, worker_reports_pb2
from trainwire_worker.artifacts import ArtifactSyncer
from trainwire_worker.datasets import read_shard
from trainwire_worker.report_client import ReportStreamClient


def checkpoint_id_for(report_index: int) -> str:
    return f"checkpoint_{report_index:06d}"


class WorkerSession(TrainSession):
    """Reports to the coordinator and serves checkpoints and dataset shards.

    Args:
        context: This worker's place in the run.
        store: The shared store checkpoints are written to.
        reports: The open report stream.
        checkpoint: What ``get_checkpoint`` returns at the start.
        dataset_shards: Dataset name -> this worker's shard.
        next_report_index: Index of this attempt's first report.
        artifacts: Syncs the artifact directory at checkpoints (SyncConfig).
    """

    def __init__(
        self,
        context: TrainContext,
        store: Store,
        reports: ReportStreamClient,
        checkpoint: Checkpoint | None,
        dataset_shards: dict[str, Any],
        next_report_index: int,
        artifacts: ArtifactSyncer | None = None,
    ) -> None:
        self.context = context
        self._store = store
        self._reports = reports
        self._checkpoint = checkpoint
        self._shards = dataset_shards
        self._next_index = next_report_index
        self._artifacts = artifacts

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
        if not isinstance(metrics, dict):
            raise InvalidArgumentError(f"train.report metrics must be a dict, got {type(metrics).__name__}")
        index = self._next_index
        self._next_index += 1
        msg = worker_reports_pb2.TrainingReport(report_index=index, metrics=metrics_to_struct(metrics))
        if checkpoint is not None:
            checkpoint_id = checkpoint_id_for(index)
            dest = self._store.checkpoint_dir(self.context.run_id, checkpoint_id)
            # Two ranks may write the same file name: each but rank 0 uploads aside and the
            # commit merges, so what the manifest lists is what the store holds.
            upload_to = (
                dest if self.context.world_rank == 0 else self._store.rank_staging_dir(dest, self.context.world_rank)
            )
            with checkpoint.as_directory() as local_dir:
                files = self._store.upload_dir(local_dir, upload_to)
            msg.checkpoint_id = checkpoint_id
            msg.files.extend(
                common_pb2.ManifestFile(path=f.path, size_bytes=f.size_bytes, sha256=f.sha256) for f in files
            )
            # A checkpoint reported in this run is what a restart resumes from.
            self._checkpoint = Checkpoint(self._store.uri_of(dest))
            if self._artifacts is not None:
                self._artifacts.on_checkpoint()
        self._reports.send(
            worker_reports_pb2.WorkerReport(
                run_id=self.context.run_id,
                attempt=self.context.attempt,
                world_rank=self.context.world_rank,
                report=msg,
            )
        )

    def get_checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    def get_dataset_shard(self, name: str) -> Any:
        if name not in self._shards:
            known = ", ".join(sorted(self._shards)) or "none"
            raise InvalidArgumentError(
                f"get_dataset_shard: no dataset named {name!r} was passed to the trainer (datasets: {known})",
                field="datasets",
            )
        shard = self._shards[name]
        if isinstance(shard, ShardSpec):
            # Declarative trainers get rows, read once here instead of via Ray Data.
            shard = self._shards[name] = read_shard(shard)
        return shard
