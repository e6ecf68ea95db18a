"""The worker's transport of the ``trainwire.train`` session (``ReportingSession`` checks and numbers).

A report with a checkpoint is persisted one of three ways (Train V2's CheckpointUploadMode):
SYNC copies it before ``report`` returns; ASYNC hands it to this worker's upload thread and
returns at once; NO_UPLOAD registers files the loop already put in the run's storage. Every
report goes out on the report stream in the order the loop made them (an ASYNC one waits in
the stream's queue until its upload is done), so the coordinator commits them in that order.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.train.session import Report, ReportingSession, TrainContext
from trainwire.train.v2 import CheckpointConsistencyMode, CheckpointUploadMode, ReportedCheckpoint, ValidationTaskConfig
from trainwire_core.datasets import ShardSpec
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import RANK_STAGING_PREFIX, ManifestEntry, Store
from trainwire_core.store_documents import CheckpointIndex
from trainwire_core.structs import metrics_to_struct
from trainwire_core.v1 import common_pb2, worker_reports_pb2
from trainwire_worker.artifacts import ArtifactSyncer
from trainwire_worker.datasets import read_shard
from trainwire_worker.report_client import ReportStreamClient
from trainwire_worker.session_sync import Collectives

logger = logging.getLogger(__name__)


def _snapshot(local_dir: str) -> str | None:
    """Hard links of a directory's files in a new directory beside it, or None where links fail.

    An ASYNC upload reads the snapshot, so the loop may delete or rewrite its directory (a
    ``TemporaryDirectory`` ends with the ``with`` block) without waiting for the upload.
    """
    parent = os.path.dirname(os.path.abspath(local_dir))
    try:
        snap = tempfile.mkdtemp(prefix=".trainwire-upload-", dir=parent)
    except OSError:
        return None
    try:
        for root, _, names in os.walk(local_dir):
            rel = os.path.relpath(root, local_dir)
            os.makedirs(os.path.join(snap, rel), exist_ok=True)
            for name in names:
                os.link(os.path.join(root, name), os.path.join(snap, rel, name))
    except OSError:
        shutil.rmtree(snap, ignore_errors=True)
        return None
    return snap


class WorkerSession(ReportingSession):
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
        super().__init__(context, checkpoint, dataset_shards, next_report_index)
        self._store = store
        self._reports = reports
        self._artifacts = artifacts
        # One thread each: uploads in report order, validations in report order beside them.
        self._uploader: ThreadPoolExecutor | None = None
        self._validator: ThreadPoolExecutor | None = None
        self._inflight: list[Future] = []
        self._lock = threading.Lock()
        self._last_checkpoint_index = 0
        # Made at the loop's first collective call: most loops make none.
        self._collectives: Collectives | None = None

    # --- report -----------------------------------------------------------------------
    def _before_report(self) -> None:
        self._raise_failed_upload()

    def _deliver(self, report: Report) -> None:
        """Persists the checkpoint (SYNC here, ASYNC on the upload thread) and sends the report in order."""
        msg = worker_reports_pb2.TrainingReport(report_index=report.index, metrics=metrics_to_struct(report.metrics))
        checkpoint = report.checkpoint
        if checkpoint is None:
            self._send(msg)
            return
        self._last_checkpoint_index = report.index
        if report.mode is CheckpointUploadMode.ASYNC:
            snap = _snapshot(checkpoint.path) if checkpoint.is_local and report.upload_fn is None else None
            source = Checkpoint.from_directory(snap) if snap else checkpoint
            future = self._pool("uploader").submit(self._persist, msg, report, source)
            if snap or report.delete_local:
                future.add_done_callback(lambda _: self._cleanup(snap, checkpoint if report.delete_local else None))
            if report.validation:
                future = self._chain_validation(future, report.validation)
            self._inflight.append(future)
            self._reports.send_later(future)
            return
        sent = self._persist(msg, report, checkpoint)
        if report.delete_local and report.mode is CheckpointUploadMode.SYNC:
            self._cleanup(None, checkpoint)
        if report.validation:
            done: Future = Future()
            done.set_result(sent)
            future = self._chain_validation(done, report.validation)
            self._inflight.append(future)
            self._reports.send_later(future)
        else:
            self._reports.send(sent)

    def _pool(self, name: str) -> ThreadPoolExecutor:
        with self._lock:
            if getattr(self, f"_{name}") is None:
                setattr(self, f"_{name}", ThreadPoolExecutor(1, thread_name_prefix=f"trainwire-{name}"))
            return getattr(self, f"_{name}")

    def _wrap(self, msg: worker_reports_pb2.TrainingReport) -> worker_reports_pb2.WorkerReport:
        return worker_reports_pb2.WorkerReport(
            run_id=self.context.run_id, attempt=self.context.attempt, world_rank=self.context.world_rank, report=msg
        )

    def _send(self, msg: worker_reports_pb2.TrainingReport) -> None:
        self._reports.send(self._wrap(msg))

    def _raise_failed_upload(self) -> None:
        for future in [f for f in self._inflight if f.done()]:
            self._inflight.remove(future)
            if future.exception() is not None:
                raise RuntimeError(f"an ASYNC checkpoint upload failed: {future.exception()}") from future.exception()

    def _cleanup(self, snap: str | None, checkpoint: Checkpoint | None) -> None:
        if snap:
            shutil.rmtree(snap, ignore_errors=True)
        self._delete_local(checkpoint)

    def _persist(
        self, msg: worker_reports_pb2.TrainingReport, report: Report, checkpoint: Checkpoint
    ) -> worker_reports_pb2.WorkerReport:
        """Puts the checkpoint's files (``checkpoint``: the report's, or its snapshot) where the commit
        takes them; returns the report to send."""
        checkpoint_id = report.checkpoint_id
        dest = self._store.checkpoint_dir(self.context.run_id, checkpoint_id)
        # Two ranks may write the same file name: each but rank 0 uploads aside and the
        # commit merges, so what the manifest lists is what the store holds.
        upload_to = (
            dest if self.context.world_rank == 0 else self._store.rank_staging_dir(dest, self.context.world_rank)
        )
        if report.upload_fn is not None:
            files = self._register_in_place(self._upload_with_fn(report), dest, upload_to)
        elif report.mode is CheckpointUploadMode.NO_UPLOAD:
            files = self._register_in_place(checkpoint, dest, upload_to)
        else:
            with checkpoint.as_directory() as local_dir:
                files = self._store.upload_dir(local_dir, upload_to)
        msg.checkpoint_id = checkpoint_id
        msg.files.extend(common_pb2.ManifestFile(path=f.path, size_bytes=f.size_bytes, sha256=f.sha256) for f in files)
        # A checkpoint reported in this run is what a restart resumes from.
        self._checkpoint = Checkpoint(self._store.uri_of(dest))
        if self._artifacts is not None:
            self._artifacts.on_checkpoint()
        return self._wrap(msg)

    def _register_in_place(self, checkpoint: Checkpoint, dest: str, upload_to: str) -> list[ManifestEntry]:
        """A checkpoint the loop (or its upload function) wrote into the run's storage: no copy.

        It must lie below the run's directory in this store; files elsewhere are refused, so
        a report cannot make the coordinator commit (and later delete) what the run does not own.
        """
        run_dir = self._store.run_dir(self.context.run_id).rstrip("/")
        path = posixpath.normpath(str(checkpoint.path).split("?", 1)[0]) if checkpoint.path else ""
        same_store = type(checkpoint.filesystem) is type(self._store.fs)
        if ".." in str(checkpoint.path).split("/") or not same_store or not path.startswith(run_dir + "/"):
            raise InvalidArgumentError(
                f"a NO_UPLOAD checkpoint must already be in the run's storage ({self._store.uri_of(run_dir)}), "
                f"got {checkpoint.uri!r}; write it under train.get_context().get_storage()"
                ".build_checkpoint_path_from_name(name), or use SYNC or ASYNC",
                field="checkpoint",
            )
        rel_inside = path[len(run_dir) + 1 :]
        if rel_inside.startswith(("checkpoints/", "checkpoints.json")) and path != dest.rstrip("/"):
            raise InvalidArgumentError(
                f"a NO_UPLOAD checkpoint in the run's checkpoints folder must be the one of its name ({dest})",
                field="checkpoint",
            )
        if path == dest.rstrip("/") and upload_to != dest:
            raise InvalidArgumentError(
                "on ranks other than 0 a NO_UPLOAD checkpoint must be a directory of its own in the run's storage "
                "(rank 0's files are the ones at the checkpoint's path)",
                field="checkpoint",
            )
        entries = []
        for rel, _ in self._store.walk_files(path):
            if rel.split("/", 1)[0].startswith(RANK_STAGING_PREFIX):
                continue
            src = f"{path}/{rel}"
            target = f"{upload_to}/{rel}"
            if src != target:
                self._store.move(src, target)
            entries.append(self._hash_stored(target, rel))
        return entries

    def _hash_stored(self, path: str, rel: str) -> ManifestEntry:
        import hashlib

        digest, size = hashlib.sha256(), 0
        with self._store.fs.open_input_stream(path) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        return ManifestEntry(rel, size, digest.hexdigest())

    # --- validation ---------------------------------------------------------------------
    def _chain_validation(self, upload: Future, validation: bool | ValidationTaskConfig) -> Future:
        """A Future of the report once its checkpoint's validation metrics have joined rank 0's."""
        result: Future = Future()

        def validate() -> None:
            try:
                report = upload.result()
            except BaseException as exc:  # noqa: BLE001 - the stream surfaces it
                result.set_exception(exc)
                return
            try:
                stored = self._store.checkpoint_dir(self.context.run_id, report.report.checkpoint_id)
                metrics = self._validation_metrics(Checkpoint(self._store.uri_of(stored)), validation, timeout=True)
                if metrics:
                    report.report.metrics.update(metrics_to_struct(metrics))
            except Exception:  # noqa: BLE001 - as Ray: a failed validation leaves the checkpoint unvalidated
                logger.exception("validation of %s failed", report.report.checkpoint_id)
            result.set_result(report)

        self._pool("validator").submit(validate)
        return result

    # --- collectives (trainwire.train.collective) -------------------------------------------
    def broadcast_from_rank_zero(self, data: Any, caller: str) -> Any:
        """Rank 0's ``data`` once every worker of this attempt has made the same call."""
        if self._collectives is None:
            ctx = self.context
            self._collectives = Collectives(ctx.run_id, ctx.attempt, ctx.world_rank, ctx.world_size)
        return self._collectives.broadcast_from_rank_zero(data, caller)

    def close(self) -> None:
        """The loop has ended on this worker (either way)."""
        if self._collectives is not None:
            self._collectives.close()

    # --- reading back -------------------------------------------------------------------
    def get_all_reported_checkpoints(
        self,
        consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
        timeout_s: float | None = None,
    ) -> list[ReportedCheckpoint]:
        """The run's committed checkpoints (those retention keeps), oldest first.

        Waits until every checkpoint this worker reported is committed; validation runs
        before the commit here, so VALIDATED and COMMITTED wait alike.
        """
        CheckpointConsistencyMode(consistency_mode)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for future in list(self._inflight):
            future.exception(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._raise_failed_upload()
        index_path = self._store.index_path(self.context.run_id)
        while True:
            exists = self._store.exists(index_path)
            index = CheckpointIndex.from_json(self._store.read_json(index_path)) if exists else None
            entries = sorted(index.checkpoints, key=lambda e: e.index) if index else []
            if not self._last_checkpoint_index or (entries and entries[-1].index >= self._last_checkpoint_index):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the run's checkpoints were not committed within {timeout_s} s")
            time.sleep(0.02)
        return [
            ReportedCheckpoint(
                Checkpoint._of_run(self._store.uri_of(self._store.checkpoint_dir(self.context.run_id, e.id))),
                dict(e.metrics),
            )
            for e in entries
        ]

    def _shard(self, name: str, data: Any) -> Any:
        if isinstance(data, ShardSpec):
            # Declarative trainers get rows, read once here instead of via Ray Data.
            data = self._datasets[name] = read_shard(data)
        return data
