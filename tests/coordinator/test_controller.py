"""The run controller driven with a fake placement, worker group, checkpoints and clock: no Ray."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from trainwire_coordinator.execution.admitted_run import AdmittedRun
from trainwire_coordinator.execution.callbacks import ControllerCallback, RunEvents
from trainwire_coordinator.execution.controller import (
    ControllerRuntime,
    ControllerSettings,
    ReportEndpoint,
    RunController,
)
from trainwire_coordinator.execution.placement import PlacementPlan
from trainwire_coordinator.execution.run_state import (
    RESIZE_AFTER_LOSS_S,
    TRANSITIONS,
    Cancelled,
    Failed,
    FailurePolicy,
    FittingPreprocessor,
    PreparingShards,
    Running,
    Starting,
    Succeeded,
)
from trainwire_core.storage import Store
from trainwire_core.structs import metrics_to_struct
from trainwire_core.v1 import common_pb2, coordinator_pb2, worker_reports_pb2

S = common_pb2
# Transitions the scenarios below went through, checked against the lifecycle table at the end.
SEEN: set[tuple[int, int]] = set()


def test_the_controller_imports_no_ray():
    code = "import sys, trainwire_coordinator.execution.controller; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@dataclass
class Meta:
    world_rank: int
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    node_id: str = "node-0"


class FakeReservation:
    def __init__(self, placed: bool) -> None:
        self.placed = asyncio.Event()
        if placed:
            self.placed.set()

    async def ready(self) -> None:
        await self.placed.wait()


class FakeGroup:
    """Ranks whose runs end when the test says so."""

    def __init__(self, size: int) -> None:
        self.metas = [Meta(rank) for rank in range(size)]
        self.results: list[asyncio.Future] = []
        self.shut_down: bool | None = None
        self.specs: list[Any] = []

    def __len__(self) -> int:
        return len(self.metas)

    async def check_framework(self, framework: str) -> None:
        pass

    def run(self, specs: list[Any]) -> list[asyncio.Future]:
        self.specs = specs
        loop = asyncio.get_running_loop()
        self.results = [loop.create_future() for _ in specs]
        return self.results

    def finish(self, rank: int, error: common_pb2.WorkerError | None = None) -> None:
        self.results[rank].set_result(error.SerializeToString() if error is not None else b"")

    def die(self, rank: int) -> None:
        self.results[rank].set_exception(RuntimeError("The actor died unexpectedly"))

    def shutdown(self, graceful: bool = False) -> None:
        self.shut_down = graceful


class FakePlacement:
    def __init__(self, cpus: float = 4, placed: bool = True, fail_from: int = 99) -> None:
        self.cpus = cpus
        self.placed = placed
        # Reservations from this one on fail (a cluster that cannot take the run any more).
        self.fail_from = fail_from
        self.groups: list[FakeGroup] = []
        self.reservations: list[FakeReservation] = []
        self.released = 0
        self.start_fails = False
        self.group_started = asyncio.Event()

    def available(self) -> dict[str, float]:
        return {"CPU": self.cpus}

    def reserve(self, bundles: list[dict[str, float]], strategy: str) -> FakeReservation:
        if len(self.reservations) >= self.fail_from:
            raise RuntimeError("placement group creation failed")
        self.reservations.append(FakeReservation(self.placed))
        return self.reservations[-1]

    def release(self, reservation: Any) -> None:
        self.released += 1

    async def start_group(
        self, reservation: Any, num_workers: int, resources: dict, env: dict, capture_child_tasks: bool = False
    ) -> FakeGroup:
        if self.start_fails:
            raise RuntimeError("the actors could not start")
        self.groups.append(FakeGroup(num_workers))
        self.group_started.set()
        return self.groups[-1]

    async def next_group(self, count: int) -> FakeGroup:
        while len(self.groups) < count:
            self.group_started.clear()
            await asyncio.wait_for(self.group_started.wait(), 5)
        # Let the controller reach the training loop.
        for _ in range(20):
            if self.groups[count - 1].results:
                break
            await asyncio.sleep(0.01)
        return self.groups[count - 1]


class FakeBackend:
    name = "torch"
    uses_ray_data = False
    reuse_workers = False

    def __init__(self) -> None:
        # Set by a test to hold the process-group set-up (a slow rendezvous).
        self.hold_start: asyncio.Event | None = None

    def worker_env(self, request: Any) -> dict[str, str]:
        return {}

    async def on_start(self, group: Any, request: Any) -> None:
        if self.hold_start is not None:
            await self.hold_start.wait()
            raise RuntimeError("the rendezvous lost its peers")  # as a torn-down group's would

    async def on_training_start(self, group: Any, request: Any) -> None:
        pass

    async def on_shutdown(self, group: Any, request: Any) -> None:
        pass


class FakeCheckpoints:
    def __init__(self) -> None:
        self.checkpoints: list[str] = []
        self.preprocessor_bytes = b""
        # What was done to the store, in order.
        self.operations: list[str] = []

    @property
    def latest(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def info(self, checkpoint: str) -> common_pb2.CheckpointInfo:
        return common_pb2.CheckpointInfo(checkpoint_id=checkpoint, uri=f"file:///ckpt/{checkpoint}")

    def ranked(self) -> list[str]:
        return list(reversed(self.checkpoints))

    def commit(self, checkpoint_id: str, index: int, metrics: dict, files: list, staged: dict | None = None) -> str:
        self.checkpoints.append(checkpoint_id)
        self.operations.append(f"commit {checkpoint_id}")
        return checkpoint_id

    def load(self) -> None:
        pass

    def remove_uncommitted(self) -> None:
        self.operations.append("remove uncommitted")


class FakeData:
    """A preprocessor whose fit waits until the test lets it finish, and shards as plain dicts."""

    def __init__(self, slow_shards: bool = False) -> None:
        self.fitted = False
        self.fit_may_end = threading.Event()
        self.shards_may_end = threading.Event()
        if not slow_shards:
            self.shards_may_end.set()

    def preprocessor_unfitted(self) -> bool:
        return not self.fitted

    def fit_preprocessor(self) -> str:
        self.fit_may_end.wait(5)
        self.fitted = True
        return "fitted"

    def shards(
        self, world_size: int, reservation: Any, uses_ray_data: bool, node_ids: list[str] | None = None
    ) -> list[dict[str, Any]]:
        self.shards_may_end.wait(5)
        return [{"train": f"shard {rank} of {world_size}"} for rank in range(world_size)]


class FakePool:
    """One warm group of the run's shape to start with; groups that end cleanly come back."""

    def __init__(self, warm: FakeGroup | None) -> None:
        self.warm = warm
        self.released: list[FakeGroup] = []

    def acquire(self, key: Any) -> tuple[Any, FakeGroup] | None:
        warm, self.warm = self.warm, None
        return ("warm reservation", warm) if warm is not None else None

    async def release(self, key: Any, pg: Any, group: FakeGroup) -> None:
        self.released.append(group)

    def evict_all(self) -> bool:
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    def __init__(
        self,
        tmp_path: Any,
        *,
        workers: int = 2,
        min_workers: int = 0,
        max_failures: int = 1,
        stall_after_s: tuple[float, float] = (60.0, 0.0),
        data: Any = None,
        pool: Any = None,
        callbacks: Sequence[ControllerCallback] = (),
        **kw: Any,
    ):
        self.placement = FakePlacement(**kw)
        self.clock = Clock()
        self.events: list[coordinator_pb2.RunEvent] = []
        request = coordinator_pb2.FitRequest(framework="torch")
        request.scaling_config.num_workers = workers
        request.scaling_config.min_workers = min_workers
        request.run_config.stop["loss_below"] = 1.0
        self.run = coordinator_pb2.Run(run_id="r1", name="run", state=S.PENDING, request=request)
        self.checkpoints = FakeCheckpoints()

        async def emit(event: coordinator_pb2.RunEvent) -> int:
            if event.HasField("state_change"):
                SEEN.add((self.states[-1], event.state_change.state))
            self.events.append(event)
            return len(self.events)

        runtime = ControllerRuntime(report=ReportEndpoint("127.0.0.1:1"), placement=self.placement, clock=self.clock)
        if pool is not None:
            runtime.pool = pool
        settings = ControllerSettings(
            pending_reason_after_s=0.01, stall_reason_after_s=stall_after_s[0], stall_fail_after_s=stall_after_s[1]
        )
        failure = FailureConfig(max_failures=max_failures)
        self.backend = FakeBackend()
        scaling = common_pb2.ScalingConfig()
        scaling.CopyFrom(request.scaling_config)
        admitted = AdmittedRun(
            request=request,
            backend=self.backend,  # type: ignore[arg-type]
            scaling_config=ScalingConfig.from_proto(request.scaling_config),
            run_config=RunConfig(failure_config=failure),
            failure_config=failure,
            checkpoint_config=CheckpointConfig(),
            datasets={},
            store=Store(f"file://{tmp_path}"),
            plan=PlacementPlan(scaling),
        )
        self.controller = RunController(
            self.run,
            admitted,
            runtime,
            FailurePolicy(failure),
            self.checkpoints,
            callbacks=[*callbacks, RunEvents(emit)],
            settings=settings,
            data=data,
        )

    @property
    def states(self) -> list[int]:
        return [S.PENDING] + [e.state_change.state for e in self.events if e.HasField("state_change")]

    def reasons(self) -> list[str]:
        return [e.state_change.reason for e in self.events if e.HasField("state_change")]

    async def done(self) -> None:
        assert self.controller.task is not None
        await asyncio.wait_for(self.controller.task, 5)

    async def report(self, rank: int, index: int, attempt: int = 0, checkpoint: str = "", **metrics: float) -> None:
        await self.controller.on_report(
            worker_reports_pb2.WorkerReport(
                run_id="r1",
                attempt=attempt,
                world_rank=rank,
                report=worker_reports_pb2.TrainingReport(
                    report_index=index, metrics=metrics_to_struct(metrics), checkpoint_id=checkpoint
                ),
            )
        )


def _error(rank: int) -> common_pb2.WorkerError:
    return common_pb2.WorkerError(world_rank=rank, exc_type="ValueError", message="boom")


def _run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, 10))


def test_a_run_whose_workers_finish_succeeds(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.start()
        group = await h.placement.next_group(1)
        assert [s.context.world_rank for s in group.specs] == [0, 1]
        assert {s.framework for s in group.specs} == {"torch"}
        group.finish(0)
        group.finish(1)
        await h.done()
        assert h.states == [S.PENDING, S.STARTING, S.RUNNING, S.SUCCEEDED]
        assert group.shut_down is True and h.placement.released == 1
        assert h.controller.state == Succeeded()

    _run(scenario())


def test_a_failure_within_max_failures_restarts_and_past_it_fails(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, max_failures=1)
        h.controller.start()
        first = await h.placement.next_group(1)
        first.finish(1, _error(1))
        second = await h.placement.next_group(2)
        assert second.specs[0].context.attempt == 1
        second.finish(0, _error(0))
        await h.done()
        assert h.states == [S.PENDING, S.STARTING, S.RUNNING, S.RESTARTING, S.STARTING, S.RUNNING, S.FAILED]
        assert h.reasons()[2].startswith("restart 1 after failure: rank 1 raised ValueError")
        # Each state change says why another attempt follows, where one does (the console's timeline).
        causes = [e.state_change.cause for e in h.events if e.HasField("state_change")]
        assert causes == ["", "", "failure", "", "", ""]
        assert h.run.num_failures == 2 and h.run.error.world_rank == 0
        assert isinstance(h.controller.state, Failed) and h.controller.state.error == h.run.error
        assert first.shut_down is False  # torn down at once after a failure
        assert sum(e.HasField("worker_error") for e in h.events) == 2

    _run(scenario())


def test_cancel_while_waiting_for_resources(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, placed=False)
        h.controller.start()
        while not h.reasons():
            await asyncio.sleep(0.01)
        assert h.states[-1] == S.PENDING and h.reasons()[-1].startswith("waiting for resources: 2 workers")
        await h.controller.cancel()
        assert h.states[-1] == S.CANCELLED and h.reasons()[-1] == "cancelled by request"
        assert h.controller.state == Cancelled()
        assert not h.placement.groups and h.placement.released == 1

    _run(scenario())


def test_cancel_during_training_tears_the_group_down(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.start()
        group = await h.placement.next_group(1)
        await h.controller.cancel()
        assert h.states == [S.PENDING, S.STARTING, S.RUNNING, S.CANCELLED]
        assert group.shut_down is False and not any(e.HasField("worker_error") for e in h.events)

    _run(scenario())


def test_a_coordinator_stop_suspends_the_run_for_its_successor(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.start()
        await h.placement.next_group(1)
        await h.controller.suspend()
        assert h.states[-1] == S.RESTARTING and "next coordinator carries the run on" in h.reasons()[-1]
        assert h.controller.task is not None and h.controller.task.done()
        assert len(h.placement.groups) == 1  # no new group here: the successor starts one

    _run(scenario())


def test_a_stop_criterion_reached_ends_the_run(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.start()
        await h.placement.next_group(1)
        await h.report(1, 1, loss_below=0.5)  # only rank 0's metrics count
        assert h.states[-1] == S.RUNNING
        await h.report(0, 1, loss_below=1.5)
        await h.done()
        assert h.states[-1] == S.SUCCEEDED and h.reasons()[-1] == "stop criteria reached"

    _run(scenario())


def test_reports_after_the_result_a_stop_was_decided_on_are_dropped(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.start()
        group = await h.placement.next_group(1)
        await h.report(0, 1, epoch=1.0)
        h.controller.keep_reports_until(1)  # a search's stopper decided to stop on result 1
        await h.report(1, 1, checkpoint="checkpoint_000001", epoch=1.0)  # the rest of result 1 still counts
        await h.report(0, 2, epoch=2.0)
        await h.report(1, 2, checkpoint="checkpoint_000002", epoch=2.0)
        assert [e.metrics.report_index for e in h.events if e.HasField("metrics")] == [1]
        assert h.checkpoints.checkpoints == ["checkpoint_000001"] and h.run.last_report_index == 1
        assert h.run.latest_metrics["epoch"] == 1.0
        group.finish(0)
        group.finish(1)
        await h.done()

    _run(scenario())


def test_a_report_from_a_stale_attempt_is_ignored(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.start()
        first = await h.placement.next_group(1)
        first.finish(0, _error(0))
        second = await h.placement.next_group(2)
        before = len(h.events)
        await h.report(0, 7, attempt=0, checkpoint="checkpoint_000007", epoch=7.0)
        await h.report(1, 7, attempt=0, checkpoint="checkpoint_000007", epoch=7.0)
        assert len(h.events) == before and not h.checkpoints.checkpoints and h.run.last_report_index == 0
        await h.report(0, 1, attempt=1, checkpoint="checkpoint_000001", epoch=1.0)
        await h.report(1, 1, attempt=1, checkpoint="checkpoint_000001", epoch=1.0)
        assert h.checkpoints.checkpoints == ["checkpoint_000001"] and h.run.last_report_index == 1
        second.finish(0)
        second.finish(1)
        await h.done()

    _run(scenario())


class HeldReports(ControllerCallback):
    """Holds rank 0's reports in the report hook until the test lets them go."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.may_go = asyncio.Event()

    async def on_report(self, run: Any, report_index: int, metrics: Any) -> None:
        self.entered.set()
        await self.may_go.wait()


def test_a_commit_owed_when_the_attempt_ends_lands_before_the_failed_attempts_files_are_cleared(tmp_path):
    # A complete report whose commit is still on its way (its hooks awaited) when a rank dies: its
    # files are not yet in the index, and clearing the failed attempt's directories first would
    # leave a committed manifest naming files that are gone.
    async def scenario() -> None:
        held = HeldReports()
        h = Harness(tmp_path, callbacks=[held])
        h.controller.start()
        first = await h.placement.next_group(1)
        await h.report(1, 1, checkpoint="checkpoint_000001", epoch=1.0)
        rank0 = asyncio.ensure_future(h.report(0, 1, checkpoint="checkpoint_000001", epoch=1.0))
        await held.entered.wait()
        first.die(1)
        await asyncio.sleep(0.3)
        assert "remove uncommitted" not in h.checkpoints.operations
        held.may_go.set()
        await rank0
        second = await h.placement.next_group(2)
        assert h.checkpoints.operations == ["commit checkpoint_000001", "remove uncommitted"]
        assert second.specs[0].checkpoint_uri.endswith("checkpoint_000001")
        second.finish(0)
        second.finish(1)
        await h.done()

    _run(scenario())


def test_an_elastic_group_carries_on_after_a_lost_worker_then_grows_at_a_checkpoint(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, workers=3, min_workers=1, cpus=3)
        h.controller.start()
        first = await h.placement.next_group(1)
        assert len(first) == 3
        first.die(2)
        second = await h.placement.next_group(2)
        # Ray still counts the lost node's CPUs: carry on with the workers that are left.
        assert len(second) == 2 and h.run.num_failures == 0
        lost = next(i for i, reason in enumerate(h.reasons()) if "a worker was lost" in reason)
        assert h.states[lost + 1] == S.RESTARTING
        h.clock.now += RESIZE_AFTER_LOSS_S + 1
        h.placement.cpus = 1  # room for one more beside the group
        await h.report(0, 1, attempt=1, checkpoint="checkpoint_000001", epoch=1.0)
        await h.report(1, 1, attempt=1, checkpoint="checkpoint_000001", epoch=1.0)
        third = await h.placement.next_group(3)
        assert len(third) == 3 and "resizing from 2 to 3 workers at a checkpoint" in h.reasons()
        assert third.specs[0].checkpoint_uri.endswith("checkpoint_000001")
        third.finish(0)
        third.finish(1)
        third.finish(2)
        await h.done()
        assert h.states[-1] == S.SUCCEEDED

    _run(scenario())


def test_an_elastic_loss_without_progress_counts_as_a_failure(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, workers=2, min_workers=1, cpus=2, max_failures=0)
        h.controller.start()
        (await h.placement.next_group(1)).die(1)
        (await h.placement.next_group(2)).die(0)  # lost again, no checkpoint in between
        await h.done()
        assert h.states[-1] == S.FAILED and h.run.num_failures == 1

    _run(scenario())


def test_a_group_that_cannot_start_restarts_then_fails(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, max_failures=1, fail_from=1)
        h.placement.start_fails = True
        h.controller.start()
        await h.done()
        # STARTING -> RESTARTING (a failure within max_failures), then the reservation itself fails.
        assert h.states == [S.PENDING, S.STARTING, S.RESTARTING, S.FAILED]
        assert "the actors could not start" in h.reasons()[1] and "placement group creation failed" in h.reasons()[2]

    _run(scenario())


def test_a_run_that_cannot_start_at_all_fails_at_once(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, max_failures=0)
        h.placement.start_fails = True
        h.controller.start()
        await h.done()
        assert h.states == [S.PENDING, S.STARTING, S.FAILED]

    _run(scenario())


def test_cancel_during_set_up_and_while_restarting(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.backend.hold_start = asyncio.Event()
        h.controller.start()
        await h.placement.next_group(1)
        cancelling = asyncio.ensure_future(h.controller.cancel())
        await asyncio.sleep(0.01)
        h.backend.hold_start.set()
        await cancelling
        assert h.states == [S.PENDING, S.STARTING, S.CANCELLED]
        assert not any(e.HasField("worker_error") for e in h.events)

        h = Harness(tmp_path)
        h.controller.start()
        first = await h.placement.next_group(1)
        h.placement.placed = False
        first.finish(0, _error(0))
        while h.states[-1] != S.RESTARTING or not h.reasons()[-1].startswith("waiting"):
            await asyncio.sleep(0.01)
        await h.controller.cancel()
        assert h.states[-2:] == [S.RESTARTING, S.CANCELLED]

    _run(scenario())


def test_a_new_coordinator_takes_a_run_over_without_counting_a_failure(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        h.controller.resume()
        group = await h.placement.next_group(1)
        assert group.specs[0].context.attempt == 1
        group.finish(0)
        group.finish(1)
        await h.done()
        assert h.states == [S.PENDING, S.RESTARTING, S.STARTING, S.RUNNING, S.SUCCEEDED]
        assert h.run.num_coordinator_restarts == 1 and h.run.num_failures == 0
        assert h.events[0].state_change.cause == "coordinator_restart"

        h = Harness(tmp_path)
        h.checkpoints.load = lambda: (_ for _ in ()).throw(OSError("store unreachable"))  # type: ignore[method-assign]
        h.controller.resume()
        await h.done()
        assert h.states == [S.PENDING, S.FAILED] and "could not resume" in h.reasons()[-1]

    _run(scenario())


def test_ranks_left_running_after_others_finished_are_named_then_failed(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, workers=3, max_failures=0, stall_after_s=(0.1, 0.4))
        h.controller.runtime.clock = time.monotonic  # its waits are the event loop's, in real time
        h.controller.start()
        group = await h.placement.next_group(1)
        group.finish(0)
        while not h.reasons()[-1].startswith("ranks 1, 2 still running"):
            await asyncio.sleep(0.01)
        assert h.states[-1] == S.RUNNING and "after ranks 0 finished" in h.reasons()[-1]
        await h.done()
        assert h.states[-1] == S.FAILED and h.run.error.exc_type == "StalledError"

    _run(scenario())


def test_slow_shards_say_what_they_wait_for_and_a_cancel_ends_the_wait(tmp_path):
    async def scenario() -> None:
        data = FakeData(slow_shards=True)
        data.fitted = True
        h = Harness(tmp_path, data=data, cpus=0.0)
        h.controller.start()
        while not isinstance(h.controller.state, PreparingShards):
            await asyncio.sleep(0.01)
        # Within pending_reason_after_s (the test's default), not never: the run names what it reads.
        assert h.states[-1] == S.STARTING
        assert h.reasons()[-1].startswith("reading datasets  for 2 workers with Ray Data")
        assert "free on the cluster: 0 CPU" in h.reasons()[-1]
        await h.controller.cancel("no time left")
        assert h.states[-1] == S.CANCELLED and h.reasons()[-1] == "no time left"
        await h.done()
        # The group and its reservation went with the run.
        assert h.placement.released == len(h.placement.reservations) == 1
        data.shards_may_end.set()

    _run(scenario())


def test_the_injected_preprocessor_fit_and_sharding(tmp_path):
    async def scenario() -> None:
        data = FakeData()
        h = Harness(tmp_path, data=data, cpus=0.5)
        h.controller.start()
        while not h.reasons():
            await asyncio.sleep(0.01)
        # A slow fit says what it waits for, with what the placement reports free.
        assert h.controller.state == FittingPreprocessor(0, "train", {"CPU": 0.5})
        assert h.states[-1] == S.PENDING and "(cluster has {'CPU': 0.5} available)" in h.reasons()[-1]
        data.fit_may_end.set()
        group = await h.placement.next_group(1)
        assert [s.dataset_shards for s in group.specs] == [{"train": "shard 0 of 2"}, {"train": "shard 1 of 2"}]
        group.finish(0)
        group.finish(1)
        await h.done()
        assert h.states == [S.PENDING, S.PENDING, S.STARTING, S.RUNNING, S.SUCCEEDED]

        data = FakeData()
        h = Harness(tmp_path, data=data)
        h.controller.start()
        while not h.reasons():
            await asyncio.sleep(0.01)
        await h.controller.cancel("the deadline passed")  # while the fit waits
        assert h.states[-1] == S.CANCELLED and h.reasons()[-1] == "the deadline passed"
        assert not h.placement.reservations
        data.fit_may_end.set()

    _run(scenario())


def test_a_warm_group_from_the_pool_is_reused_and_given_back(tmp_path):
    async def scenario() -> None:
        warm = FakeGroup(2)
        pool = FakePool(warm)
        h = Harness(tmp_path, pool=pool)
        h.backend.reuse_workers = True
        h.controller.start()
        while not warm.results:
            await asyncio.sleep(0.01)
        assert h.controller.state == Running(2) and h.reasons()[0] == "reusing warm workers"
        assert Starting(2, warm=True).reason == h.reasons()[0] and not h.placement.reservations
        warm.finish(0)
        warm.finish(1)
        await h.done()
        assert h.states[-1] == S.SUCCEEDED and pool.released == [warm] and warm.shut_down is None

    _run(scenario())


def test_the_scenarios_cover_every_transition_of_the_lifecycle():
    """Run last: every transition of the lifecycle table was driven by a scenario above."""
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets if a != b}
    assert table - SEEN == set(), sorted(table - SEEN)


if __name__ == "__main__":
    pytest.main([__file__])
