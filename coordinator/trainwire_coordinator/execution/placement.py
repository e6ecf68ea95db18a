"""Placement, owned by the coordinator: a run's bundles, its worker group in one placement group, warm groups.

A group of worker actors (``WorkerGroup``) lives in a placement group the coordinator reserves
(``RayPlacement``) for a run's bundles (``PlacementPlan``). Starting a worker process and
importing a framework takes seconds, so after a successful run of a backend whose workers are
safe to reuse, the group (with its placement group) waits in the ``WorkerPool`` for the next run
of the same shape (several of one shape, for a search's concurrent trials). Idle groups are
ended after ``idle_s``, and at once when another run needs their resources.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from trainwire_coordinator.execution.run_state import ScalingPolicy
from trainwire_core.v1 import common_pb2
from trainwire_core.worker_runtime import WORKER_RUNTIME_GROUP, WorkerRun


@dataclass
class WorkerMeta:
    """Where a rank runs."""

    world_rank: int
    local_rank: int
    local_world_size: int
    node_rank: int
    node_id: str
    node_ip: str
    pid: int


def _worker_resources(scaling: common_pb2.ScalingConfig) -> dict[str, float]:
    per_worker = {k: v for k, v in scaling.resources_per_worker.items() if v > 0} or {"CPU": 1.0}
    if scaling.use_gpu:
        per_worker.setdefault("GPU", 1.0)
    return per_worker


def scaling_policy(scaling: common_pb2.ScalingConfig) -> ScalingPolicy:
    """Fixed at ``num_workers``, or elastic from ``min_workers`` up to it."""
    return ScalingPolicy(scaling.min_workers or scaling.num_workers, scaling.num_workers, _worker_resources(scaling))


def bundles_for(scaling: common_pb2.ScalingConfig, num_workers: int | None = None) -> list[dict[str, float]]:
    """One bundle per worker (``num_workers``, else the run's smallest group); trainer resources ride on the first."""
    per_worker = _worker_resources(scaling)
    count = num_workers or scaling.min_workers or scaling.num_workers
    bundles = [dict(per_worker) for _ in range(count)]
    for key, value in scaling.trainer_resources.items():
        if value > 0:
            bundles[0][key] = bundles[0].get(key, 0) + value
    return bundles


@dataclass(frozen=True, eq=False)
class PlacementPlan:
    """Where a run's groups are placed, derived once from its request by admission.

    Attributes:
        scaling: The scaling the workers are placed from (a backend may put its trainer on its
            worker: ``CoordinatorBackend.placement_scaling``); a copy, never the request's own.
        side_bundles: Bundles reserved after the workers' for actors the training function
            starts itself (``CoordinatorBackend.side_bundles``).
    """

    scaling: common_pb2.ScalingConfig
    side_bundles: tuple[dict[str, float], ...] = ()

    @property
    def strategy(self) -> str:
        """The placement group's strategy (Ray's default, PACK, when the request names none)."""
        return self.scaling.placement_strategy or "PACK"

    def bundles(self, num_workers: int | None = None) -> list[dict[str, float]]:
        """The workers' bundles for a group of ``num_workers`` (else the run's smallest group)."""
        return bundles_for(self.scaling, num_workers)

    def scaling_policy(self) -> ScalingPolicy:
        """Fixed at ``num_workers``, or elastic from ``min_workers`` up to it."""
        return scaling_policy(self.scaling)

    def needs(self) -> dict[str, float]:
        """What the run's smallest group reserves, side bundles included, summed by resource."""
        need: dict[str, float] = {}
        for bundle in self.bundles() + list(self.side_bundles):
            for key, value in bundle.items():
                need[key] = need.get(key, 0.0) + value
        return need


def _actor_options(resources: dict[str, float]) -> dict[str, Any]:
    extra = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    opts: dict[str, Any] = {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0)}
    if extra:
        opts["resources"] = extra
    if "memory" in resources:
        opts["memory"] = resources["memory"]
    return opts


@functools.cache
def worker_actor_class() -> type:
    """The worker runtime's actor class (not yet wrapped with ``ray.remote``).

    Raises:
        RuntimeError: No worker runtime is installed.
    """
    found = entry_points(group=WORKER_RUNTIME_GROUP, name="actor")
    if not found:
        raise RuntimeError(
            f"no trainwire worker runtime is installed (entry point group {WORKER_RUNTIME_GROUP!r}): "
            "pip install trainwire-worker on every Ray node"
        )
    return next(iter(found)).load()


@functools.cache
def _remote_worker_class() -> Any:
    import ray

    return ray.remote(worker_actor_class())


class WorkerGroup:
    """The actors of one attempt of a run, ranked by node like Ray Train's.

    Create with ``await WorkerGroup.start(...)``.
    """

    def __init__(self, actors: list[Any], metas: list[WorkerMeta]) -> None:
        self.actors = actors
        self.metas = metas

    @classmethod
    async def start(
        cls,
        pg: Any,
        num_workers: int,
        resources: dict[str, float],
        env: dict[str, str] | None = None,
        capture_child_tasks: bool = False,
    ) -> WorkerGroup:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        # Captured only when the run reserved side bundles for them: otherwise a loop's own
        # Ray tasks (Ray Data's) would wait for room in bundles the workers fill.
        actors = [
            _remote_worker_class()
            .options(
                **_actor_options(resources),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=i, placement_group_capture_child_tasks=capture_child_tasks
                ),
                runtime_env={"env_vars": env} if env else None,
                max_concurrency=2,
            )
            .remote()
            for i in range(num_workers)
        ]
        infos = await asyncio.gather(*[a.node_info.remote() for a in actors])
        # Ranks go node by node, so local ranks are contiguous (as in Ray Train).
        node_order: list[str] = []
        for node_id, _, _ in infos:
            if node_id not in node_order:
                node_order.append(node_id)
        order = sorted(range(num_workers), key=lambda i: (node_order.index(infos[i][0]), i))
        actors = [actors[i] for i in order]
        infos = [infos[i] for i in order]
        metas = []
        for rank, (node_id, ip, pid) in enumerate(infos):
            same_node = [i for i, info in enumerate(infos) if info[0] == node_id]
            metas.append(
                WorkerMeta(
                    world_rank=rank,
                    local_rank=same_node.index(rank),
                    local_world_size=len(same_node),
                    node_rank=node_order.index(node_id),
                    node_id=node_id,
                    node_ip=ip,
                    pid=pid,
                )
            )
        return cls(actors, metas)

    def __len__(self) -> int:
        return len(self.actors)

    async def execute(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """Runs ``fn(worker, *args)`` on every worker at once; returns results by rank."""
        return await asyncio.gather(*[a.execute.remote(fn, *args) for a in self.actors])

    async def execute_single(self, rank: int, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.actors[rank].execute.remote(fn, *args)

    async def execute_each(self, fn: Callable[..., Any], args_by_rank: list[tuple[Any, ...]]) -> list[Any]:
        """Runs ``fn(worker, *args_by_rank[rank])`` on every worker at once."""
        return await asyncio.gather(*[a.execute.remote(fn, *args) for a, args in zip(self.actors, args_by_rank)])

    async def check_framework(self, framework: str) -> None:
        """Fails, with the install hint, when a worker's host lacks the framework's package."""
        await asyncio.gather(*[a.check_framework.remote(framework) for a in self.actors])

    def run(self, specs: list[WorkerRun]) -> list[Any]:
        """Starts the training function on every rank (``specs`` by rank); returns their object refs."""
        return [actor.run.remote(spec) for actor, spec in zip(self.actors, specs)]

    def shutdown(self, graceful: bool = False) -> None:
        """Ends the actors: politely after success, at once after a failure or cancel."""
        import ray

        for actor in self.actors:
            if graceful:
                actor.__ray_terminate__.remote()
            else:
                ray.kill(actor, no_restart=True)
        self.actors = []


class RayPlacement:
    """Where the controller's groups come from: Ray placement groups and worker actors.

    The controller calls these few methods only, so its tests place fake groups.
    """

    def available(self) -> dict[str, float]:
        """What the cluster reports available now."""
        import ray

        return ray.available_resources()

    def reserve(self, bundles: list[dict[str, float]], strategy: str) -> Any:
        """A placement group of ``bundles`` (its ``ready()`` resolves once Ray placed it)."""
        from ray.util.placement_group import placement_group

        return placement_group(bundles, strategy=strategy)

    def release(self, reservation: Any) -> None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(reservation)

    async def start_group(
        self,
        reservation: Any,
        num_workers: int,
        resources: dict[str, float],
        env: dict[str, str],
        capture_child_tasks: bool = False,
    ) -> WorkerGroup:
        return await WorkerGroup.start(reservation, num_workers, resources, env, capture_child_tasks)


# --- warm groups kept between runs ---------------------------------------------------


def _clear_state(worker: Any) -> None:
    worker.state.clear()


# Idle groups kept per shape: as many as a search runs trials of that shape at once, within reason.
MAX_IDLE_PER_SHAPE = 8


class WorkerPool:
    """Idle worker groups keyed by what they were started with, several per key.

    A search runs several trials of one shape at once: each finds a warm group of its own.

    Args:
        idle_s: How long an idle group is kept; 0 disables the pool.
    """

    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._idle: dict[Hashable, list[tuple[Any, WorkerGroup, asyncio.TimerHandle]]] = {}
        self.reused = 0

    def acquire(self, key: Hashable) -> tuple[Any, WorkerGroup] | None:
        """Takes an idle group of this shape (the one that waited least), if there is one."""
        entries = self._idle.get(key)
        if not entries:
            return None
        pg, group, timer = entries.pop()
        if not entries:
            del self._idle[key]
        timer.cancel()
        self.reused += 1
        return pg, group

    async def release(self, key: Hashable, pg: Any, group: WorkerGroup) -> None:
        """Keeps a group that finished cleanly for the next run of the same shape."""
        if self.idle_s <= 0 or len(self._idle.get(key, ())) >= MAX_IDLE_PER_SHAPE:
            _end(pg, group, graceful=True)
            return
        try:
            await group.execute(_clear_state)
        except Exception:  # noqa: BLE001 - a worker that cannot be reset is not reused
            _end(pg, group, graceful=False)
            return
        timer = asyncio.get_running_loop().call_later(self.idle_s, self._expire, key, group)
        self._idle.setdefault(key, []).append((pg, group, timer))

    def _expire(self, key: Hashable, group: WorkerGroup) -> None:
        entries = self._idle.get(key, [])
        for i, (pg, idle, _) in enumerate(entries):
            if idle is group:
                del entries[i]
                if not entries:
                    del self._idle[key]
                _end(pg, idle, graceful=True)
                return

    def evict_all(self) -> bool:
        """Ends every idle group (their resources are needed); True if any was ended."""
        evicted = bool(self._idle)
        for key in list(self._idle):
            for pg, group, timer in self._idle.pop(key):
                timer.cancel()
                _end(pg, group, graceful=True)
        return evicted


def _end(pg: Any, group: WorkerGroup, graceful: bool) -> None:
    from ray.util.placement_group import remove_placement_group

    group.shutdown(graceful=graceful)
    remove_placement_group(pg)
