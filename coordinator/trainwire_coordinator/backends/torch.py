"""Torch: a real process group (gloo on CPU, nccl on GPU) across the workers, rendezvous at rank 0."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from trainwire.huggingface.framework import FRAMEWORK as HUGGINGFACE
from trainwire.torch.framework import FRAMEWORK
from trainwire_coordinator.backends.base import DataParallelBackend, WorkerGroup, free_port
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2


def _setup_process_group(
    worker: Any,
    master_addr: str,
    master_port: int,
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    backend: str,
    timeout_s: float,
    init_method: str = "env",
) -> None:
    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(local_rank),
        # As torchrun sets it; accelerate sizes its CPU threads by it.
        LOCAL_WORLD_SIZE=str(local_world_size),
    )
    # MASTER_ADDR/MASTER_PORT are set either way: libraries on top of torch (accelerate) read them.
    url = "env://" if init_method == "env" else f"tcp://{master_addr}:{master_port}"
    dist.init_process_group(
        backend=backend,
        init_method=url,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def _destroy_process_group(worker: Any) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class TorchBackend(DataParallelBackend):
    name = FRAMEWORK.name

    async def on_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        options = struct_to_dict(request.data_parallel.backend_config)
        backend = options.get("backend") or ("nccl" if request.scaling_config.use_gpu else "gloo")
        timeout_s = float(options.get("timeout_s", 1800))
        init_method = options.get("init_method") or "env"
        if init_method not in ("env", "tcp"):
            raise InvalidArgumentError(
                f"The provided init_method ({init_method}) is not supported. Must be either 'env' or 'tcp'.",
                field="data_parallel.backend_config.init_method",
            )
        master_addr = group.metas[0].node_ip
        master_port = await group.execute_single(0, free_port)
        await group.execute_each(
            _setup_process_group,
            [
                (
                    master_addr,
                    master_port,
                    m.world_rank,
                    len(group),
                    m.local_rank,
                    m.local_world_size,
                    backend,
                    timeout_s,
                    init_method,
                )
                for m in group.metas
            ],
        )

    async def on_shutdown(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        await group.execute(_destroy_process_group)


class HuggingFaceBackend(TorchBackend):
    """Transformers runs on the torch process group; its checkpoints name their own framework."""

    name = HUGGINGFACE.name
