"""``SyncConfig``: copies a worker's artifact directory into the run's directory in the shared store.

Ray Train syncs each worker's trial directory (``train.get_context().get_trial_dir()``) to
``storage_path`` every ``sync_period``, at checkpoints and at the end. Here checkpoints already
go straight to the shared store, so only artifacts are synced, to
``runs/<run_id>/artifacts/rank_<world rank>/``. Unchanged files (same size and mtime) are not
sent again. A sync that takes longer than ``sync_timeout_s`` is left to finish in the
background and logged; training does not wait longer than that.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from trainwire.config import SyncConfig
from trainwire_core.storage import Store

logger = logging.getLogger(__name__)


def artifacts_dir(store: Store, run_id: str, world_rank: int) -> str:
    """Where a rank's artifacts land in the store."""
    return store.path("runs", run_id, "artifacts", f"rank_{world_rank}")


class ArtifactSyncer:
    """Syncs one worker's artifact directory on a period, at checkpoints and at the end.

    Args:
        store: The shared store.
        run_id: The run.
        world_rank: This worker's rank (each rank has its own folder).
        local_dir: The worker's artifact directory (its trial dir).
        config: The run's SyncConfig.
    """

    def __init__(self, store: Store, run_id: str, world_rank: int, local_dir: str, config: SyncConfig) -> None:
        self.store = store
        self.dest = artifacts_dir(store, run_id, world_rank)
        self.local_dir = Path(local_dir)
        self.config = config
        self.syncs = 0
        self._sent: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.config.sync_artifacts and self.config.sync_period_s > 0:
            self._thread = threading.Thread(target=self._periodic, name="trainwire-artifact-sync", daemon=True)
            self._thread.start()

    def _periodic(self) -> None:
        while not self._stop.wait(self.config.sync_period_s):
            self.sync()

    def on_checkpoint(self) -> None:
        if self.config.sync_artifacts and self.config.sync_artifacts_on_checkpoint:
            self.sync()

    def close(self) -> None:
        """Stops the periodic sync and syncs what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.sync_timeout_s)
        if self.config.sync_artifacts:
            self.sync()

    def sync(self) -> None:
        """Copies new and changed files, waiting at most ``sync_timeout_s``."""
        done = threading.Event()

        def copy() -> None:
            try:
                with self._lock:
                    self._copy_changed()
            except Exception:  # noqa: BLE001 - a failed sync must not fail training
                logger.exception("artifact sync to %s failed", self.store.uri_of(self.dest))
            finally:
                done.set()

        threading.Thread(target=copy, name="trainwire-artifact-copy", daemon=True).start()
        if not done.wait(self.config.sync_timeout_s):
            logger.warning("artifact sync took over %ss; it goes on in the background", self.config.sync_timeout_s)

    def _copy_changed(self) -> None:
        if not self.local_dir.is_dir():
            return
        for root, _, names in os.walk(self.local_dir):
            for name in names:
                path = Path(root, name)
                rel = path.relative_to(self.local_dir).as_posix()
                stat = path.stat()
                stamp = (stat.st_size, stat.st_mtime_ns)
                if self._sent.get(rel) == stamp:
                    continue
                self.store.write_bytes(f"{self.dest}/{rel}", path.read_bytes())
                self._sent[rel] = stamp
        self.syncs += 1
