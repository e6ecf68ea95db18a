"""TensorBoard: a run's metrics as event files, as Ray's ``TBXLoggerCallback`` (tensorboardX)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from trainwire.air.integrations import _tracking
from trainwire.callbacks import RunCallback
from trainwire_core.structs import flatten_metrics

if TYPE_CHECKING:
    from trainwire.result import Result
    from trainwire_core.v1 import coordinator_pb2


def default_logdir() -> str:
    return os.path.join(os.path.expanduser("~"), "trainwire_results")


class TBXLoggerCallback(RunCallback):
    """Writes each run's numeric metrics to ``<logdir>/<run name>`` for ``tensorboard --logdir``.

    Args:
        logdir: The folder runs are written under (default: ``~/trainwire_results``).
    """

    def __init__(self, logdir: str | os.PathLike | None = None) -> None:
        self.logdir = os.fspath(logdir) if logdir is not None else default_logdir()
        self.writer: Any = None
        self._config: dict[str, Any] = {}
        self._reports = 0
        self._last: dict[str, float] = {}

    def run_dir(self, run: coordinator_pb2.RunInfo) -> str:
        return os.path.join(self.logdir, run.name or run.run_id)

    def on_run_start(self, run: coordinator_pb2.RunInfo, config: dict[str, Any]) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(self.run_dir(run), flush_secs=5)
        self._config, self._reports, self._last = dict(config), 0, {}
        self.writer.add_text("config", json.dumps(_tracking.params(config), indent=1, sort_keys=True), 0)

    def on_metrics(self, run: coordinator_pb2.RunInfo, metrics: dict[str, Any]) -> None:
        if self.writer is None:
            return
        self._reports += 1
        step = _tracking.step_of(metrics, self._reports)
        values = _tracking.numeric_metrics(metrics)
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self._last.update(values)

    def on_run_end(self, run: coordinator_pb2.RunInfo, result: Result) -> None:
        if self.writer is None:
            return
        try:
            # The params beside the last metrics, for TensorBoard's HParams view (as Ray's).
            hparams = {k: v for k, v in flatten_metrics(dict(self._config)).items() if isinstance(v, int | float | str)}
            self.writer.add_hparams(hparams, {f"final/{k}": v for k, v in self._last.items()}, name="hparams")
        finally:
            self.writer.close()
            self.writer = None
