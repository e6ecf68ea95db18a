"""Commits reported checkpoints into the shared store and applies retention."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format, timestamp_pb2

from trainwire.checkpoint import PREPROCESSOR_NAME
from trainwire.config import CheckpointConfig
from trainwire_core.manifest import CODE_TRUSTED_KEY
from trainwire_core.storage import MANIFEST_NAME, Store
from trainwire_core.store_documents import CheckpointIndex, IndexedCheckpoint, RegistryState
from trainwire_core.structs import flatten_metrics
from trainwire_core.v1 import common_pb2


@dataclass
class CommittedCheckpoint:
    checkpoint_id: str
    index: int
    metrics: dict[str, Any]
    size_bytes: int
    created_at: float
    files: list[dict[str, Any]] = field(default_factory=list)
    version: int = 0

    def to_index_entry(self) -> IndexedCheckpoint:
        return IndexedCheckpoint(
            self.checkpoint_id, self.index, self.metrics, self.size_bytes, self.created_at, self.version
        )


class CheckpointManager:
    """The committed checkpoints of one run and its index file.

    The index (``runs/<id>/checkpoints.json``) is written atomically before
    any checkpoint it drops is deleted, so a reader never sees a checkpoint
    that is gone.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        run_name: str,
        config: CheckpointConfig,
        framework: str = "",
        code_trusted: bool = True,
    ) -> None:
        self.store = store
        # Written into every manifest: whether the predictor may load the checkpoint's pickles.
        self.code_trusted = code_trusted
        self.run_id = run_id
        self.run_name = run_name
        self.config = config
        self.framework = framework
        # The run's fitted preprocessor, saved into every checkpoint.
        self.preprocessor_bytes = b""
        self.checkpoints: list[CommittedCheckpoint] = []
        # The last checkpoint number given (numbers are never reused, also after retention drops one).
        self.last_version = 0

    def load(self) -> None:
        """Takes up the committed checkpoints of a run a previous coordinator started.

        The index file is the record of what was committed; the latest checkpoint
        carries the run's fitted preprocessor, so it is not fitted again.
        """
        if not self.store.exists(self.store.index_path(self.run_id)):
            return
        index = CheckpointIndex.from_json(self.store.read_json(self.store.index_path(self.run_id)))
        self.checkpoints = [
            CommittedCheckpoint(
                checkpoint_id=entry.id,
                index=entry.index,
                metrics=dict(entry.metrics),
                size_bytes=entry.size_bytes,
                created_at=entry.created_at,
                version=entry.version,
            )
            for entry in sorted(index.checkpoints, key=lambda e: e.index)
        ]
        self.last_version = index.last_version
        latest = self.latest
        if latest is not None:
            preprocessor = f"{self.store.checkpoint_dir(self.run_id, latest.checkpoint_id)}/{PREPROCESSOR_NAME}"
            if self.store.exists(preprocessor):
                self.preprocessor_bytes = self.store.read_bytes(preprocessor)

    # --- ranking -----------------------------------------------------------
    def _score(self, ckpt: CommittedCheckpoint) -> float:
        attr = self.config.checkpoint_score_attribute
        value = flatten_metrics(ckpt.metrics).get(attr) if attr else None
        if not isinstance(value, int | float):
            return float("-inf")  # unscored checkpoints rank last
        return value if self.config.checkpoint_score_order == "max" else -value

    def ranked(self) -> list[CommittedCheckpoint]:
        """Kept checkpoints, best first (newest first without a score attribute)."""
        if self.config.checkpoint_score_attribute:
            return sorted(self.checkpoints, key=lambda c: (self._score(c), c.index), reverse=True)
        return sorted(self.checkpoints, key=lambda c: c.index, reverse=True)

    @property
    def latest(self) -> CommittedCheckpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def best(self) -> CommittedCheckpoint | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    # --- commit --------------------------------------------------------------
    def commit(
        self,
        checkpoint_id: str,
        index: int,
        metrics: dict[str, Any],
        files: list[Any],
        staged: dict[int, list[Any]] | None = None,
    ) -> CommittedCheckpoint:
        """Writes the manifest (last), updates the index, then deletes what retention drops.

        Args:
            checkpoint_id: The checkpoint's directory name.
            index: The report it came with.
            metrics: Rank 0's metrics of that report.
            files: The files written in place (rank 0's, or an upload's).
            staged: The files other ranks wrote aside, by rank; merged in rank order. Where
                two ranks wrote the same path, the lower rank's file is kept, as Ray keeps
                rank 0's checkpoint.
        """
        directory = self.store.checkpoint_dir(self.run_id, checkpoint_id)
        entries = {f.path: {"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256} for f in files}
        for rank, rank_files in sorted((staged or {}).items()):
            aside = self.store.rank_staging_dir(directory, rank)
            for f in rank_files:
                if f.path not in entries:
                    self.store.move(f"{aside}/{f.path}", f"{directory}/{f.path}")
                    entries[f.path] = {"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256}
            self.store.delete_dir(aside)
        if self.preprocessor_bytes:
            self.store.write_bytes(f"{directory}/{PREPROCESSOR_NAME}", self.preprocessor_bytes)
            entries[PREPROCESSOR_NAME] = {
                "path": PREPROCESSOR_NAME,
                "size_bytes": len(self.preprocessor_bytes),
                "sha256": hashlib.sha256(self.preprocessor_bytes).hexdigest(),
            }
        ckpt = CommittedCheckpoint(
            checkpoint_id=checkpoint_id,
            index=index,
            metrics=metrics,
            size_bytes=sum(e["size_bytes"] for e in entries.values()),
            created_at=time.time(),
            files=sorted(entries.values(), key=lambda e: e["path"]),
            version=self.last_version + 1,
        )
        self.store.write_json(
            f"{directory}/{MANIFEST_NAME}",
            {
                "run_id": self.run_id,
                "checkpoint_id": checkpoint_id,
                "framework": self.framework,
                CODE_TRUSTED_KEY: self.code_trusted,
                "metrics": metrics,
                "files": ckpt.files,
            },
        )
        self.checkpoints.append(ckpt)
        self.last_version = ckpt.version
        dropped = self._apply_retention()
        self.write_index()
        for old in dropped:
            self.store.delete_dir(self.store.checkpoint_dir(self.run_id, old.checkpoint_id))
        return ckpt

    def _apply_retention(self) -> list[CommittedCheckpoint]:
        keep_n = self.config.num_to_keep
        if keep_n is None or len(self.checkpoints) <= keep_n:
            return []
        latest = self.latest
        keep = {c.checkpoint_id for c in self.ranked()[:keep_n]}
        keep.add(latest.checkpoint_id)  # the latest is what a restart resumes from
        keep |= self._served()
        dropped = [c for c in self.checkpoints if c.checkpoint_id not in keep]
        self.checkpoints = [c for c in self.checkpoints if c.checkpoint_id in keep]
        return dropped

    def _served(self) -> set[str]:
        """The checkpoint ids the model registry points at (aliases, weights, shadow).

        Retention keeps them past ``num_to_keep``: deleting the version an operator pinned as
        ``production`` would leave the predictors answering NOT_FOUND for it.
        """
        return RegistryState.read(self.store, self.run_id).served_versions()

    def write_index(self) -> None:
        best, latest = self.best, self.latest
        CheckpointIndex(
            run_id=self.run_id,
            run_name=self.run_name,
            checkpoints=tuple(c.to_index_entry() for c in self.checkpoints),
            latest=latest.checkpoint_id if latest else "",
            best=best.checkpoint_id if best else "",
            score_attribute=self.config.checkpoint_score_attribute or "",
            score_order=self.config.checkpoint_score_order,
            updated_at=time.time(),
            last_version=self.last_version,
        ).write(self.store)
        # A run name resolves to the newest run of that name with a checkpoint.
        self.store.write_json(self.store.name_path(self.run_name), {"run_id": self.run_id, "updated_at": time.time()})

    def remove_uncommitted(self) -> None:
        """Deletes checkpoint directories no index entry names (left by a failed attempt)."""
        committed = {c.checkpoint_id for c in self.checkpoints}
        base = self.store.path("runs", self.run_id, "checkpoints")
        for name in self.store.list_dir(base):
            if name not in committed:
                self.store.delete_dir(f"{base}/{name}")

    # --- views -------------------------------------------------------------
    def info(self, ckpt: CommittedCheckpoint) -> common_pb2.CheckpointInfo:
        created = timestamp_pb2.Timestamp()
        created.FromNanoseconds(int(ckpt.created_at * 1e9))
        msg = common_pb2.CheckpointInfo(
            checkpoint_id=ckpt.checkpoint_id,
            uri=self.store.uri_of(self.store.checkpoint_dir(self.run_id, ckpt.checkpoint_id)),
            index=ckpt.index,
            size_bytes=ckpt.size_bytes,
            created_at=created,
        )
        json_format.ParseDict(ckpt.metrics, msg.metrics)
        return msg
