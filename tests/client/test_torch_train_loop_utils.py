"""``trainwire.train.torch.prepare_model`` as Ray's: the device, the strategy and its keyword arguments."""

from __future__ import annotations

import pytest
import torch

from trainwire.torch import train_loop_utils
from trainwire.torch.train_loop_utils import prepare_model


class _Recorder(torch.nn.Module):
    """Stands in for DistributedDataParallel: records how it was built."""

    def __init__(self, module: torch.nn.Module, **kwargs: object) -> None:
        super().__init__()
        self.module, self.kwargs = module, kwargs


@pytest.fixture
def two_workers(monkeypatch):
    """A process group of two, as seen by prepare_model (no real group is needed to build the wrapper)."""
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a, **k: 2)
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", _Recorder)
    monkeypatch.setattr(train_loop_utils, "get_device", lambda: torch.device("cpu"))


def test_ddp_gets_parallel_strategy_kwargs(two_workers):
    model = torch.nn.Linear(2, 1)
    wrapped = prepare_model(model, parallel_strategy_kwargs={"find_unused_parameters": True})
    assert isinstance(wrapped, _Recorder) and wrapped.module is model
    assert wrapped.kwargs == {"find_unused_parameters": True}  # no device_ids on the CPU


def test_no_strategy_leaves_the_model_unwrapped_and_a_device_may_be_named(two_workers):
    model = torch.nn.Linear(2, 1)
    assert prepare_model(model, parallel_strategy=None) is model
    assert prepare_model(model, move_to_device=torch.device("cpu"), parallel_strategy=None) is model


def test_fsdp_needs_a_gpu_and_unknown_strategies_are_refused(two_workers):
    model = torch.nn.Linear(2, 1)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="FSDP is only available with GPU"):
            prepare_model(model, parallel_strategy="fsdp")
    with pytest.raises(ValueError, match="parallel_strategy must be"):
        prepare_model(model, parallel_strategy="zero3")


def test_one_worker_is_not_wrapped():
    model = torch.nn.Linear(2, 1)  # no process group here: one worker, nothing to wrap
    assert prepare_model(model, parallel_strategy_kwargs={"find_unused_parameters": True}) is model
