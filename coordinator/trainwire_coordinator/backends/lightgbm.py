"""LightGBM: data-parallel tree learning, each worker told every machine's address before training."""

from __future__ import annotations

from typing import Any

from trainwire.lightgbm.framework import FRAMEWORK
from trainwire_coordinator.backends.base import WorkerGroup
from trainwire_coordinator.backends.gbdt import GBDTBackend
from trainwire_core.v1 import coordinator_pb2


def _set_network(worker: Any, network: dict[str, Any]) -> None:
    worker.state["lightgbm_network"] = network


class LightGBMBackend(GBDTBackend):
    name = FRAMEWORK.name

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        if len(group) == 1:
            await group.execute(_set_network, {})
            return
        ports = await group.execute(lambda w: w.free_port())
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
