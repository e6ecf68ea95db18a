"""ray.tune.utils' diagnostics as Ray's: diagnose_serialization, validate_save_restore, wait_for_gpu, UtilMonitor."""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest

from trainwire import tune
from trainwire.tune.utils import UtilMonitor, diagnose_serialization, validate_save_restore, wait_for_gpu

# A global no pickler can ship: a trainable that uses it cannot travel to a worker.
_LOCK = threading.Lock()


def _uses_lock(config: dict) -> None:
    with _LOCK:
        pass


def _self_contained(config: dict) -> None:
    lock = threading.Lock()
    with lock:
        pass


def test_diagnose_serialization_passes_a_trainable_that_pickles(capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose_serialization(_self_contained) is True
    assert "Serialization succeeded!" in capsys.readouterr().out


def test_diagnose_serialization_names_the_global_that_does_not_pickle(capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose_serialization(_uses_lock) == {"_LOCK"}
    out = capsys.readouterr().out
    assert "Serialization failed" in out
    assert "Detected 1 global variables" in out
    assert "[name='_LOCK'']... FAILED" in out
    assert "Variable(s) {'_LOCK'} was found to be non-serializable" in out


def test_diagnose_serialization_names_a_nonlocal_and_passes_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    event = threading.Event()
    fine = 3

    def train_fn(config: dict) -> None:
        print(event, fine)

    assert diagnose_serialization(train_fn) == {"event"}
    out = capsys.readouterr().out
    assert "[name='event'']... FAILED" in out
    assert "[name='fine'']... PASSED" in out


class _Counter(tune.Trainable):
    def setup(self, config: dict) -> None:
        self.total = 0
        self.stopped = False

    def step(self) -> dict:
        self.total += 1
        return {"total": self.total}

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        return {"total": self.total}

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.total = checkpoint["total"]


class _Forgetful(_Counter):
    # Its restore loses the iteration count: a fresh training_iteration restarts at 1.
    def step(self) -> dict:
        return {"total": 0, "training_iteration": 1}


def test_validate_save_restore_passes_a_class_that_resumes() -> None:
    assert validate_save_restore(_Counter) is True
    assert validate_save_restore(_Counter, config={"lr": 0.1}, num_gpus=0) is True


def test_validate_save_restore_raises_when_the_restore_does_not_carry_on() -> None:
    with pytest.raises(AssertionError):
        validate_save_restore(_Forgetful)


def test_wait_for_gpu_without_gputil_raises_as_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "GPUtil", None)  # import GPUtil raises ImportError
    with pytest.raises(RuntimeError, match="GPUtil must be installed if calling `wait_for_gpu`."):
        wait_for_gpu()


def _fake_gputil(monkeypatch: pytest.MonkeyPatch, memory: list[float]) -> types.SimpleNamespace:
    """A GPUtil whose GPU 0 reports the next memory fraction in ``memory`` at each poll."""
    polls = iter(memory)

    def get_gpus() -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(id=0, uuid="GPU-abc", load=0.5, memoryUtil=next(polls, memory[-1]))]

    fake = types.SimpleNamespace(getGPUs=get_gpus)
    monkeypatch.setitem(sys.modules, "GPUtil", fake)
    return fake


def test_wait_for_gpu_checks_its_arguments_as_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gputil(monkeypatch, [0.0])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(RuntimeError, match="No GPU ids found"):
        wait_for_gpu()
    with pytest.raises(ValueError, match="must be type str/int"):
        wait_for_gpu(gpu_id=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="3 not found in set of available GPUs"):
        wait_for_gpu(gpu_id=3)
    with pytest.raises(ValueError, match="GPU-zzz not found"):
        wait_for_gpu(gpu_id="GPU-zzz")


def test_wait_for_gpu_waits_until_the_memory_is_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first getGPUs() lists ids; then busy, busy, free.
    _fake_gputil(monkeypatch, [0.9, 0.9, 0.9, 0.0])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert wait_for_gpu(delay_s=0) is True
    _fake_gputil(monkeypatch, [0.9])
    with pytest.raises(RuntimeError, match="GPU memory was not freed."):
        wait_for_gpu(gpu_id="GPU-abc", retry=2, delay_s=0)
    _fake_gputil(monkeypatch, [0.0])
    assert wait_for_gpu(gpu_id="0") is True


def test_util_monitor_returns_the_means_ray_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psutil")
    _fake_gputil(monkeypatch, [0.25])
    monitor = UtilMonitor(start=False)
    assert monitor.get_data() == {}  # not started: nothing, as Ray's
    monitor = UtilMonitor(delay=0.01)
    try:
        deadline = time.monotonic() + 5
        data: dict = {}
        while time.monotonic() < deadline and len(data.get("perf", {})) < 4:
            time.sleep(0.05)
            data = monitor.get_data()
    finally:
        monitor.stop()
    perf = data["perf"]
    assert set(perf) == {"cpu_util_percent", "ram_util_percent", "gpu_util_percent0", "vram_util_percent0"}
    assert perf["gpu_util_percent0"] == pytest.approx(0.5)
    assert perf["vram_util_percent0"] == pytest.approx(0.25)
    assert 0 <= perf["ram_util_percent"] <= 100
