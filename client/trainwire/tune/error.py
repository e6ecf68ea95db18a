"""``TuneError``, as ``ray.tune.TuneError``."""

from __future__ import annotations

from typing import Any


class TuneError(RuntimeError):
    """The search itself failed (not one of its trials: those are in ``ResultGrid.errors``).

    Attributes:
        tune_run: The search as the coordinator last reported it (a ``tune_pb2.TuneRun``).
        results: The ``ResultGrid`` of the trials it ran.
        field: The request field the failure is about (e.g. ``tune_config.metric``), or "".
    """

    def __init__(self, message: str, tune_run: Any = None, results: Any = None) -> None:
        super().__init__(message)
        self.tune_run, self.results = tune_run, results
        self.field = getattr(tune_run, "error_field", "")
