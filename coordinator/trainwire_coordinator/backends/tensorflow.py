"""TensorFlow: ``TF_CONFIG`` on every worker, for ``MultiWorkerMirroredStrategy``."""

from __future__ import annotations

import json
import os
from typing import Any

from trainwire.tensorflow.framework import FRAMEWORK
from trainwire_coordinator.backends.base import DataParallelBackend, WorkerGroup, free_port
from trainwire_core.v1 import coordinator_pb2


def tf_config(addresses: list[str], rank: int) -> str:
    """The ``TF_CONFIG`` JSON of worker ``rank`` in a cluster of ``addresses`` (by rank)."""
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": rank}})


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _set_tf_config(worker: Any, config: str) -> None:
    os.environ["TF_CONFIG"] = config


def _clear_tf_config(worker: Any) -> None:
    os.environ.pop("TF_CONFIG", None)


class TensorflowBackend(DataParallelBackend):
    """Sets ``TF_CONFIG`` so the loop's ``tf.distribute.MultiWorkerMirroredStrategy()`` finds its peers."""

    name = FRAMEWORK.name

    def worker_env(self, request: coordinator_pb2.FitRequest) -> dict[str, str]:
        # Keras 3 cannot train under MultiWorkerMirroredStrategy; tf.keras must be tf-keras (Keras 2),
        # which TensorFlow picks only when this is set before it is imported.
        return {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}

    async def on_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        ports = await group.execute(free_port)
        addresses = [f"{_host(meta.node_ip)}:{port}" for meta, port in zip(group.metas, ports)]
        await group.execute_each(_set_tf_config, [(tf_config(addresses, m.world_rank),) for m in group.metas])

    async def on_shutdown(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        await group.execute(_clear_tf_config)
