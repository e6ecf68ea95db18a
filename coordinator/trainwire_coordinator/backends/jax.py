"""JAX: ``jax.distributed.initialize`` on every worker, its coordination service at rank 0.

As Ray's ``JaxConfig`` backend: rank 0's host and a free port on it are the coordinator
address, every worker joins with its world rank as the process id, and the group is shut
down before the workers are. Workers run JAX on CPU unless the run uses GPUs (CUDA, on the
devices Ray gave each worker).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from trainwire.jax.framework import FRAMEWORK
from trainwire_coordinator.backends.base import DataParallelBackend, WorkerGroup, free_port
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2

logger = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 30.0


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _uses_gpu(request: coordinator_pb2.FitRequest) -> bool:
    options = struct_to_dict(request.data_parallel.backend_config)
    return bool(options.get("use_gpu", request.scaling_config.use_gpu))


def _initialize(worker: Any, address: str, num_processes: int, process_id: int, timeout_s: int) -> None:
    import jax

    platforms = os.environ.get("JAX_PLATFORMS", "").lower().split(",")
    kwargs: dict[str, Any] = {}
    if "cuda" in platforms:
        # Ray sets CUDA_VISIBLE_DEVICES to the worker's GPUs; JAX numbers them from 0.
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        kwargs["local_device_ids"] = list(range(len(visible))) if visible else 0
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout_s,
        **kwargs,
    )


def _shutdown(worker: Any) -> None:
    import sys

    jax = sys.modules.get("jax")
    if jax is None:
        return
    try:
        jax.distributed.shutdown()
    except Exception:  # a worker that failed mid-collective: its group is ending anyway
        logger.warning("jax.distributed.shutdown failed", exc_info=True)


class JaxBackend(DataParallelBackend):
    name = FRAMEWORK.name

    def worker_env(self, request: coordinator_pb2.FitRequest) -> dict[str, str]:
        # Set before the worker imports jax: it picks its platform once.
        return {"JAX_PLATFORMS": "cuda" if _uses_gpu(request) else "cpu"}

    async def on_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        options = struct_to_dict(request.data_parallel.backend_config)
        timeout_s = int(options.get("timeout_s", 300))
        port = await group.execute_single(0, free_port)
        address = f"{_host(group.metas[0].node_ip)}:{port}"
        # initialize blocks until every process has joined: all ranks at once.
        await group.execute_each(_initialize, [(address, len(group), m.world_rank, timeout_s) for m in group.metas])

    async def on_shutdown(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        try:
            await asyncio.wait_for(group.execute(_shutdown), SHUTDOWN_TIMEOUT_S)
        except TimeoutError:
            logger.warning("jax.distributed.shutdown did not end within %.0f s", SHUTDOWN_TIMEOUT_S)
