"""A Keras callback that reports to trainwire, as ``ray.train.tensorflow.keras``.

Importing this module imports TensorFlow (the callback subclasses ``tf.keras.callbacks.Callback``).
"""

from __future__ import annotations

import shutil
from typing import Any

import tensorflow as tf

from trainwire import train
from trainwire.tensorflow.checkpoint import TensorflowCheckpoint

_HOOKS = (
    "epoch_begin",
    "epoch_end",
    "train_begin",
    "train_end",
    "train_batch_begin",
    "train_batch_end",
    "test_begin",
    "test_end",
    "test_batch_begin",
    "test_batch_end",
    "predict_begin",
    "predict_end",
    "predict_batch_begin",
    "predict_batch_end",
)


def _hooks(value: str | list[str], name: str) -> list[str]:
    hooks = [value] if isinstance(value, str) else list(value)
    unknown = [h for h in hooks if h not in _HOOKS]
    if unknown:
        raise ValueError(f"{name}: unknown hook(s) {unknown}; choose from {list(_HOOKS)}")
    return hooks


class ReportCheckpointCallback(tf.keras.callbacks.Callback):
    """Reports Keras logs (and a checkpoint of the model) with ``trainwire.train.report``.

    Every worker reports at the same hooks, as ``train.report`` requires. Every worker saves
    the model (saving may need all of them under a distribution strategy), but only rank 0's
    copy becomes the checkpoint.

    Args:
        checkpoint_on: Hook(s) at which to report a checkpoint too, e.g. "epoch_end", "train_end".
        report_metrics_on: Hook(s) at which to report metrics; must include ``checkpoint_on``.
        metrics: Which logs to report: None (all), a key, a list of keys, or
            a dict of reported name -> log key.
    """

    def __init__(
        self,
        checkpoint_on: str | list[str] = "epoch_end",
        report_metrics_on: str | list[str] = "epoch_end",
        metrics: str | list[str] | dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._checkpoint_on = _hooks(checkpoint_on, "checkpoint_on")
        self._report_metrics_on = _hooks(report_metrics_on, "report_metrics_on")
        missing = [h for h in self._checkpoint_on if h not in self._report_metrics_on]
        if missing:
            raise ValueError(f"checkpoint_on {missing} must also be in report_metrics_on {self._report_metrics_on}")
        self._metrics = metrics

    def _selected(self, logs: dict[str, Any] | None) -> dict[str, Any]:
        logs = logs or {}
        if self._metrics is None:
            names = {k: k for k in logs}
        elif isinstance(self._metrics, str):
            names = {self._metrics: self._metrics}
        elif isinstance(self._metrics, dict):
            names = dict(self._metrics)
        else:
            names = {k: k for k in self._metrics}
        return {name: _scalar(logs[key]) for name, key in names.items() if key in logs}

    def _handle(self, logs: dict[str, Any] | None, when: str) -> None:
        if when not in self._report_metrics_on:
            return
        metrics = self._selected(logs)
        if when not in self._checkpoint_on:
            train.report(metrics)
            return
        checkpoint = TensorflowCheckpoint.from_model(self.model)
        try:
            keep = train.get_context().get_world_rank() == 0
            train.report(metrics, checkpoint=checkpoint if keep else None)
        finally:
            shutil.rmtree(checkpoint.path, ignore_errors=True)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "epoch_begin")

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "epoch_end")

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "train_begin")

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "train_end")

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "train_batch_begin")

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "train_batch_end")

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "test_begin")

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "test_end")

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "test_batch_begin")

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "test_batch_end")

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "predict_begin")

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "predict_end")

    def on_predict_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "predict_batch_begin")

    def on_predict_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._handle(logs, "predict_batch_end")


def _scalar(value: Any) -> Any:
    # Keras logs may hold numpy or tensor scalars; reports carry plain numbers.
    try:
        return float(value)
    except (TypeError, ValueError):
        return value
