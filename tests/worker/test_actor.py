"""The worker actor's return-value file: what rank 0 writes and the SDK's Result reads back."""

from __future__ import annotations

import pytest

from trainwire.result import read_return_value
from trainwire_core.storage import RETURN_VALUE_MAX_BYTES, Store
from trainwire_worker.actor import write_return_value


def test_return_value_round_trips_and_none_replaces_an_earlier_value(tmp_path):
    store = Store(str(tmp_path))
    write_return_value(store, "run1", {"acc": 0.9})
    run_path = store.uri_of(store.run_dir("run1"))
    assert read_return_value(run_path) == {"acc": 0.9}
    write_return_value(store, "run1", None)  # a later attempt that returned None
    assert read_return_value(run_path) is None


def test_a_return_value_past_the_limit_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="return_value is .* over the limit"):
        write_return_value(Store(str(tmp_path)), "run1", b"x" * (RETURN_VALUE_MAX_BYTES + 1))


def test_a_return_value_that_cannot_be_pickled_is_refused_by_name(tmp_path):
    import threading

    with pytest.raises(ValueError, match="return_value cannot be pickled"):
        write_return_value(Store(str(tmp_path)), "run1", threading.Lock())


def test_the_runs_log_level_sets_the_train_loggers():
    import logging

    from trainwire_worker.actor import TRAIN_LOGGERS, apply_log_level

    before = {name: logging.getLogger(name).level for name in TRAIN_LOGGERS}
    try:
        apply_log_level("DEBUG")
        assert all(logging.getLogger(name).level == logging.DEBUG for name in TRAIN_LOGGERS)
        apply_log_level("")  # unset: left as it is
        assert all(logging.getLogger(name).level == logging.DEBUG for name in TRAIN_LOGGERS)
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)


class _SpiedEnviron(dict):
    """A process environment that records each variable set or removed."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.touched: list[tuple[str, str]] = []

    def __setitem__(self, name: str, value: str) -> None:
        self.touched.append(("set", name))
        super().__setitem__(name, value)

    def __delitem__(self, name: str) -> None:
        self.touched.append(("unset", name))
        super().__delitem__(name)

    def clear(self) -> None:
        self.touched.extend(("unset", name) for name in self)
        super().clear()


def test_the_environment_is_put_back_touching_only_the_variables_a_run_changed(monkeypatch):
    # Unsetting a variable another thread reads (Ray's, the libraries') crashes it in getenv.
    import os

    from trainwire_worker.actor import restore_environ

    saved = {"KEPT": "1", "CHANGED": "before", "REMOVED": "x"}
    spied = _SpiedEnviron({"KEPT": "1", "CHANGED": "after", "ADDED": "y"})
    monkeypatch.setattr(os, "environ", spied)
    restore_environ(saved)
    assert dict(spied) == saved
    assert sorted(spied.touched) == [("set", "CHANGED"), ("set", "REMOVED"), ("unset", "ADDED")]
