"""The torch backend's process group: both of Ray's init methods ("env" and "tcp") start one."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest

from trainwire.torch import TorchConfig, TorchTrainer
from trainwire_coordinator.backends.base import free_port
from trainwire_coordinator.backends.torch import TorchBackend, _destroy_process_group, _setup_process_group
from trainwire_core.errors import InvalidArgumentError

dist = pytest.importorskip("torch.distributed")


@pytest.mark.parametrize("init_method", ["env", "tcp"])
def test_each_init_method_starts_a_process_group(init_method, monkeypatch):
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    port = free_port(None)
    try:
        _setup_process_group(None, "127.0.0.1", port, 0, 1, 0, 1, "gloo", 30, init_method)
        assert dist.is_initialized() and dist.get_world_size() == 1
        assert os.environ["MASTER_ADDR"] == "127.0.0.1" and os.environ["MASTER_PORT"] == str(port)
    finally:
        _destroy_process_group(None)
    assert not dist.is_initialized()


def test_torch_config_carries_init_method_and_refuses_others_as_ray():
    trainer = TorchTrainer(lambda: None, torch_config=TorchConfig(init_method="tcp"))
    assert trainer.backend_config["init_method"] == "tcp"
    assert TorchConfig().init_method == "env"
    with pytest.raises(ValueError, match="Must be either 'env' or 'tcp'"):
        TorchConfig(init_method="file")


def test_the_coordinator_refuses_an_unknown_init_method_by_field():
    from trainwire_core.structs import to_struct
    from trainwire_core.v1 import coordinator_pb2

    request = coordinator_pb2.FitRequest()
    request.data_parallel.backend_config.CopyFrom(to_struct({"init_method": "file"}, "backend_config"))
    group = SimpleNamespace(metas=[SimpleNamespace(node_ip="127.0.0.1")])
    with pytest.raises(InvalidArgumentError, match="init_method"):
        asyncio.run(TorchBackend().on_start(group, request))
