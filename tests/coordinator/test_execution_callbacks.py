"""The controller's typed hooks: what fires, in which order, and what a failing callback does (no Ray)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.coordinator.test_controller import Harness, _error, _run
from trainwire_coordinator.execution.callbacks import (
    ControllerCallback,
    ControllerMetricsCallback,
    RunPersistence,
    run_record,
)
from trainwire_coordinator.execution.run_state import ControllerState
from trainwire_coordinator.metadata import open_metadata_store
from trainwire_coordinator.metrics import CoordinatorMetrics
from trainwire_core.v1 import common_pb2, coordinator_pb2

S = common_pb2


class Recorder(ControllerCallback):
    """Writes each hook it sees to a shared log, with what the run showed at that moment."""

    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.log = log

    async def after_controller_state_update(
        self, run: coordinator_pb2.Run, previous: ControllerState, current: ControllerState
    ) -> None:
        # The run's public state is already the new one when its callbacks hear of it.
        assert run.state == current.run_state and run.state_reason == current.reason
        self.log.append((self.name, "state", type(previous).__name__, type(current).__name__))

    async def on_worker_error(self, run: coordinator_pb2.Run, error: common_pb2.WorkerError, counted: bool) -> None:
        self.log.append((self.name, "worker_error", error.world_rank, counted))

    async def on_restart(self, run: coordinator_pb2.Run, cause: str) -> None:
        self.log.append((self.name, "restart", cause, run.attempt))

    async def on_report(self, run: coordinator_pb2.Run, report_index: int, metrics: Any) -> None:
        self.log.append((self.name, "report", report_index, dict(metrics)["acc"]))

    async def on_checkpoint_committed(
        self, run: coordinator_pb2.Run, info: common_pb2.CheckpointInfo, seconds: float
    ) -> None:
        assert seconds >= 0 and run.latest_checkpoint.checkpoint_id == info.checkpoint_id
        self.log.append((self.name, "checkpoint", info.checkpoint_id))

    async def after_report(self, run: coordinator_pb2.Run) -> None:
        self.log.append((self.name, "after_report", run.last_report_index))


class Raising(ControllerCallback):
    """Fails in every hook."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self) -> None:
        self.calls += 1
        raise RuntimeError("the tracker is down")

    async def after_controller_state_update(self, run: Any, previous: Any, current: Any) -> None:
        self._fail()

    async def on_worker_error(self, run: Any, error: Any, counted: bool) -> None:
        self._fail()

    async def on_restart(self, run: Any, cause: str) -> None:
        self._fail()

    async def on_report(self, run: Any, report_index: int, metrics: Any) -> None:
        self._fail()

    async def on_checkpoint_committed(self, run: Any, info: Any, seconds: float) -> None:
        self._fail()

    async def after_report(self, run: Any) -> None:
        self._fail()


async def _restart_once(h: Harness) -> None:
    """A checkpoint, a failure that restarts the group, then a second group that finishes."""
    h.controller.start()
    first = await h.placement.next_group(1)
    await h.report(0, 1, checkpoint="c1", acc=0.5)
    await h.report(1, 1, checkpoint="c1", acc=0.4)
    first.finish(1, _error(1))
    second = await h.placement.next_group(2)
    second.finish(0)
    second.finish(1)
    await h.done()


def test_hooks_fire_in_order_for_a_run_that_restarts_once(tmp_path):
    log: list[tuple[Any, ...]] = []
    metrics = CoordinatorMetrics()
    h = Harness(
        tmp_path,
        max_failures=1,
        callbacks=[Recorder("a", log), ControllerMetricsCallback(metrics), Recorder("b", log)],
    )
    _run(_restart_once(h))

    expected = [
        ("state", "Initializing", "Starting"),
        ("state", "Starting", "Running"),
        ("report", 1, 0.5),  # rank 0's metrics are the run's
        ("after_report", 1),
        ("checkpoint", "c1"),  # once every rank reported index 1
        ("after_report", 1),
        ("worker_error", 1, True),
        ("state", "Running", "Restarting"),
        ("restart", "failure", 1),
        ("state", "Restarting", "Starting"),
        ("state", "Starting", "Running"),
        ("state", "Running", "Succeeded"),
    ]
    # Every hook reaches the callbacks in the order they were given.
    assert log == [(name, *entry) for entry in expected for name in ("a", "b")]
    assert h.states == [S.PENDING, S.STARTING, S.RUNNING, S.RESTARTING, S.STARTING, S.RUNNING, S.SUCCEEDED]

    # The metrics the controller used to count inline, counted by their callback.
    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("trainwire_worker_failures_total", counted="true") == 1
    assert sample("trainwire_run_restarts_total", reason="failure") == 1
    assert sample("trainwire_runs_finished_total", state="SUCCEEDED") == 1
    assert sample("trainwire_checkpoint_commit_duration_seconds_count") == 1


def test_a_raising_callback_is_logged_and_the_run_goes_on(tmp_path, caplog):
    raising = Raising()
    log: list[tuple[Any, ...]] = []
    h = Harness(tmp_path, max_failures=1, callbacks=[raising, Recorder("after", log)])
    with caplog.at_level(logging.ERROR, logger="trainwire_coordinator.execution.callbacks"):
        _run(_restart_once(h))

    # The run ends as it would without the callback, and the callbacks after it heard everything.
    assert h.states == [S.PENDING, S.STARTING, S.RUNNING, S.RESTARTING, S.STARTING, S.RUNNING, S.SUCCEEDED]
    assert h.run.state == S.SUCCEEDED and h.run.latest_checkpoint.checkpoint_id == "c1"
    assert sum(e.HasField("worker_error") for e in h.events) == 1
    assert sum(e.HasField("checkpoint") for e in h.events) == 1
    assert len(log) == raising.calls == 12
    failures = [r for r in caplog.records if "callback Raising failed" in r.getMessage()]
    assert len(failures) == raising.calls
    assert {r.exc_info[1].args[0] for r in failures if r.exc_info} == {"the tracker is down"}


def test_the_record_is_saved_after_each_state_change_and_report(tmp_path):
    metadata = open_metadata_store(str(tmp_path / "meta.db"))
    with ThreadPoolExecutor(1) as writes:
        persistence = RunPersistence(metadata, writes)
        saved: list[tuple[int, int]] = []
        update = metadata.update_run

        def update_run(record: Any) -> None:
            run = coordinator_pb2.Run.FromString(record.data)
            saved.append((run.state, run.last_report_index))
            update(record)

        metadata.update_run = update_run  # type: ignore[method-assign]
        h = Harness(tmp_path, max_failures=1, callbacks=[persistence])
        metadata.create_run(run_record(h.run))
        _run(_restart_once(h))

    # One save per state change and per report, each with the run as it was then.
    assert saved == [
        (S.STARTING, 0),
        (S.RUNNING, 0),
        (S.RUNNING, 1),  # rank 0's report
        (S.RUNNING, 1),  # rank 1's, with the checkpoint
        (S.RESTARTING, 1),
        (S.STARTING, 1),
        (S.RUNNING, 1),
        (S.SUCCEEDED, 1),
    ]
    record = metadata.get_run(h.run.run_id)
    assert record is not None and record.state == S.SUCCEEDED and record.updated_at > 0
    assert coordinator_pb2.Run.FromString(record.data).latest_checkpoint.checkpoint_id == "c1"
