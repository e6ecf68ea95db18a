"""XGBoost: rank 0 runs the collective's tracker; every worker gets its arguments before training.

Both forms of XGBoostTrainer train inside that collective: the declarative one, and a user's
training function (the worker enters the collective around it, as Ray's ``XGBoostConfig`` does).
"""

from __future__ import annotations

from typing import Any

from trainwire.xgboost.framework import FRAMEWORK
from trainwire_coordinator.backends.base import DataParallelBackend, WorkerGroup
from trainwire_coordinator.backends.gbdt import GBDTBackend
from trainwire_core.v1 import coordinator_pb2


def _start_tracker(worker: Any, host_ip: str, world_size: int) -> dict[str, Any]:
    from xgboost.tracker import RabitTracker

    tracker = RabitTracker(n_workers=world_size, host_ip=host_ip, sortby="task")
    tracker.start()
    worker.state["xgboost_tracker"] = tracker  # keeps it alive for the run
    return tracker.worker_args()


def _set_args(worker: Any, args: dict[str, Any]) -> None:
    worker.state["xgboost_args"] = args


async def start_collective(group: WorkerGroup) -> None:
    """Starts the tracker on rank 0 and tells every worker where it is (one worker needs none)."""
    if len(group) == 1:
        return
    args = await group.execute_single(0, _start_tracker, group.metas[0].node_ip, len(group))
    await group.execute(_set_args, args)


class XGBoostFunctionBackend(DataParallelBackend):
    """XGBoostTrainer with a ``train_loop_per_worker``: the user's loop inside the collective."""

    name = FRAMEWORK.name

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        await start_collective(group)


class XGBoostBackend(GBDTBackend):
    name = FRAMEWORK.name
    function_form = XGBoostFunctionBackend

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        await start_collective(group)
