"""Horovod: ``horovod.torch`` over gloo, set up the way Ray Train's ``_HorovodBackend`` did, without horovodrun.

The coordinator runs Horovod's rendezvous server for each worker group, works out the
host allocation plan from where the workers landed (one host per Ray node, a slot per
worker on it), and gives each worker the ``HOROVOD_*`` variables ``hvd.init()`` reads.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from trainwire.horovod.framework import FRAMEWORK
from trainwire_coordinator.backends.base import DataParallelBackend, WorkerGroup
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2

INSTALL_HINT = "build it with scripts/build_horovod.sh (`make setup` does): PyPI's sdist needs patches for torch 2.x"


def host_allocation_plan(node_ids: list[str]) -> list[Any]:
    """Horovod's SlotInfo per world rank: hosts are Ray nodes, each with a slot per worker on it.

    ``node_ids`` is the node of each world rank; ranks on one node are contiguous (the
    worker group orders them so), which makes Horovod's ranks the group's world ranks.
    """
    from horovod.runner.common.util import hosts

    slots: dict[str, int] = {}
    for node_id in node_ids:
        slots[node_id] = slots.get(node_id, 0) + 1
    plan = hosts.get_host_assignments([hosts.HostInfo(n, s) for n, s in slots.items()], len(node_ids))
    for rank, (slot, node_id) in enumerate(zip(plan, node_ids)):
        if slot.rank != rank or slot.hostname != node_id:
            raise RuntimeError(f"horovod placed rank {slot.rank} on {slot.hostname}, the group has {rank} on {node_id}")
    return plan


def slot_env(slot: Any) -> dict[str, str]:
    """The per-rank variables of one SlotInfo."""
    return {
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
    }


def _gloo_iface(node_ip: str, all_local: bool) -> str:
    """The interface gloo binds: as horovodrun picks it (127.0.0.1's when all hosts are local),
    else the one holding this node's Ray address, which the other nodes reach."""
    import socket

    import psutil

    want = "127.0.0.1" if all_local else node_ip
    for iface, addrs in psutil.net_if_addrs().items():
        if any(a.family in (socket.AF_INET, socket.AF_INET6) and a.address.split("%")[0] == want for a in addrs):
            return iface
    raise RuntimeError(f"no network interface holds {want}; set HorovodConfig(nics=...)")


def _setup_worker(worker: Any, env: dict[str, str], nics: list[str], node_ip: str, all_local: bool) -> str:
    iface = nics[0] if nics else _gloo_iface(node_ip, all_local)
    os.environ.update(env, HOROVOD_GLOO_IFACE=iface)
    return iface


def _shutdown_worker(worker: Any) -> None:
    hvd = sys.modules.get("horovod.torch")
    if hvd is not None and hvd.is_initialized():
        hvd.shutdown()


def _coordinator_address() -> str:
    import ray

    return ray.util.get_node_ip_address()


class HorovodBackend(DataParallelBackend):
    """Starts a rendezvous server per worker group; the user's loop calls ``hvd.init()``."""

    name = FRAMEWORK.name

    def __init__(self) -> None:
        self._servers: dict[int, Any] = {}

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        options = struct_to_dict(request.data_parallel.backend_config)
        nics = options.get("nics") or []
        if not isinstance(nics, list) or not all(isinstance(n, str) and n for n in nics):
            raise InvalidArgumentError("nics must be a list of interface names", field="data_parallel.backend_config")
        timeout_s = options.get("timeout_s", 300)
        if not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise InvalidArgumentError(
                f"timeout_s must be a positive number of seconds, got {timeout_s!r}",
                field="data_parallel.backend_config",
            )
        try:  # the rendezvous server runs here, in the coordinator
            import horovod.runner.http.http_server  # noqa: F401
        except ImportError as exc:
            raise FailedPreconditionError(f"horovod is not installed on the coordinator: {INSTALL_HINT}") from exc

    async def on_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        from horovod.runner.http.http_server import RendezvousServer

        options = struct_to_dict(request.data_parallel.backend_config)
        nics = [str(n) for n in options.get("nics") or []]
        timeout_s = int(options.get("timeout_s", 300))
        verbose = int(options.get("verbose", 1))

        plan = host_allocation_plan([m.node_id for m in group.metas])
        server = RendezvousServer(verbose)
        port = server.start()
        self._servers[id(group)] = server
        server.init(plan)
        common = {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": _coordinator_address(),
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(timeout_s),
        }
        all_local = len({m.node_id for m in group.metas}) == 1
        await group.execute_each(
            _setup_worker,
            [({**common, **slot_env(slot)}, nics, m.node_ip, all_local) for slot, m in zip(plan, group.metas)],
        )

    async def on_shutdown(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        try:
            await group.execute(_shutdown_worker)
        finally:
            server = self._servers.pop(id(group), None)
            if server is not None:
                await asyncio.to_thread(server.stop)
