"""LightGBM: data-parallel tree learning, each worker told every machine's address before training.

The declarative form gets the network merged into its params; a user's training function reads
it from ``get_network_params()`` (as Ray's ``LightGBMConfig`` sets it up), even with one worker.
"""

from __future__ import annotations

from typing import Any

from trainwire.lightgbm.framework import FRAMEWORK
from trainwire_coordinator.backends.base import DataParallelBackend, WorkerGroup, free_port
from trainwire_coordinator.backends.gbdt import GBDTBackend
from trainwire_core.v1 import coordinator_pb2


def _set_network(worker: Any, network: dict[str, Any]) -> None:
    worker.state["lightgbm_network"] = network


async def set_up_network(group: WorkerGroup) -> None:
    """Gives every worker a listening port of its own and the list of all workers' addresses."""
    ports = await group.execute(free_port)
    machines = ",".join(f"{m.node_ip}:{port}" for m, port in zip(group.metas, ports))
    await group.execute_each(
        _set_network,
        [
            (
                {
                    "tree_learner": "data",
                    "num_machines": len(group),
                    "machines": machines,
                    "local_listen_port": port,
                    # All rows of a worker are its own: no need to re-partition.
                    "pre_partition": True,
                    "time_out": 2,
                },
            )
            for port in ports
        ],
    )


class LightGBMFunctionBackend(DataParallelBackend):
    """LightGBMTrainer with a ``train_loop_per_worker``: the user's loop, told the network."""

    name = FRAMEWORK.name

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        await set_up_network(group)


class LightGBMBackend(GBDTBackend):
    name = FRAMEWORK.name
    function_form = LightGBMFunctionBackend

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        if len(group) == 1:
            await group.execute(_set_network, {})
            return
        await set_up_network(group)
