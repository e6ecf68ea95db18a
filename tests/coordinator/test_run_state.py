"""The run lifecycle as plain logic: transitions, decisions after an attempt, elastic sizing (no Ray)."""

from __future__ import annotations

import pytest

from trainwire import FailureConfig, ScalingConfig
from trainwire_coordinator.execution.run_state import (
    ACTIVE,
    CANCELLED,
    FAILED,
    PENDING,
    RESIZE_AFTER_LOSS_S,
    RESTARTING,
    RUNNING,
    STARTING,
    SUCCEEDED,
    TERMINAL,
    TRANSITIONS,
    AttemptOutcome,
    Cancelled,
    Failed,
    FailurePolicy,
    FittingPreprocessor,
    IllegalTransitionError,
    Initializing,
    LossMemory,
    Reserving,
    Resizing,
    Restarting,
    Running,
    ScalingPolicy,
    Signals,
    Stalled,
    Starting,
    Succeeded,
    Suspended,
    after_attempt,
    check_transition,
    group_size,
    is_stale,
    resize_target,
    stop_reached,
)
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2

ERROR = common_pb2.WorkerError(world_rank=1, exc_type="RuntimeError", message="boom")


def test_terminal_states_have_no_way_out():
    for state in TERMINAL:
        for new in ACTIVE | TERMINAL:
            with pytest.raises(IllegalTransitionError):
                check_transition(state, new)


@pytest.mark.parametrize(
    ("current", "new"),
    [(PENDING, RUNNING), (PENDING, SUCCEEDED), (RESTARTING, RUNNING), (STARTING, SUCCEEDED), (RUNNING, STARTING)],
)
def test_illegal_shortcuts_are_refused(current, new):
    with pytest.raises(IllegalTransitionError, match="cannot go from"):
        check_transition(current, new)


def test_every_active_state_can_end_and_be_taken_over():
    for state in ACTIVE:
        assert {FAILED, CANCELLED, RESTARTING} <= TRANSITIONS[state]


def test_the_happy_path_is_legal():
    path = [PENDING, STARTING, RUNNING, RESTARTING, STARTING, RUNNING, SUCCEEDED]
    for current, new in zip(path, path[1:]):
        check_transition(current, new)


def test_a_failure_restarts_while_the_policy_allows():
    policy = FailurePolicy(FailureConfig(max_failures=1))
    first = after_attempt(AttemptOutcome(error=ERROR), 0, policy)
    assert (first.run_state, first.restarts, first.counts_as_failure) == (RESTARTING, True, True)
    assert first.reason == "restart 1 after failure: rank 1 raised RuntimeError: boom"
    second = after_attempt(AttemptOutcome(error=ERROR), 1, policy)
    assert (second.run_state, second.restarts, second.counts_as_failure) == (FAILED, False, True)
    assert second.reason == "rank 1 raised RuntimeError: boom"


def test_fail_fast_never_restarts():
    decision = after_attempt(
        AttemptOutcome(error=ERROR), 0, FailurePolicy(FailureConfig(max_failures=-1, fail_fast=True))
    )
    assert decision.run_state == FAILED


def test_a_stopping_coordinator_leaves_the_run_for_its_successor():
    decision = after_attempt(AttemptOutcome(suspended=True, cancelled=True), 0, FailurePolicy(FailureConfig()))
    assert (decision.run_state, decision.restarts, decision.counts_as_failure) == (RESTARTING, False, False)


def test_cancel_wins_over_an_error_and_a_resize():
    decision = after_attempt(
        AttemptOutcome(error=ERROR, cancelled=True, resize_to=4), 0, FailurePolicy(FailureConfig())
    )
    assert (decision.run_state, decision.counts_as_failure) == (CANCELLED, False)


def test_a_resize_restarts_without_counting_a_failure():
    decision = after_attempt(AttemptOutcome(resize_to=4, world_size=2), 0, FailurePolicy(FailureConfig()))
    assert (decision.run_state, decision.restarts, decision.counts_as_failure) == (RESTARTING, True, False)
    assert decision.reason == "resizing from 2 to 4 workers at a checkpoint"


def test_stop_criteria_end_the_run_even_when_a_resize_was_asked():
    decision = after_attempt(AttemptOutcome(stop_reached=True, resize_to=4), 0, FailurePolicy(FailureConfig()))
    assert (decision.run_state, decision.reason) == (SUCCEEDED, "stop criteria reached")


def test_elastic_policy_starts_with_what_fits_and_grows_to_max():
    policy = ScalingPolicy(2, 6, {"CPU": 1.0})
    assert policy.workers_to_start({"CPU": 3.5}) == 3
    assert policy.workers_to_start({"CPU": 0.0}) == 2  # waits for the minimum
    assert policy.workers_to_start({"CPU": 64.0}) == 6
    assert policy.resize_to(3, {"CPU": 0.5}) == 0
    assert policy.resize_to(3, {"CPU": 2.0}) == 5
    assert policy.resize_to(3, {"CPU": 9.0}) == 6
    assert policy.resize_to(6, {"CPU": 9.0}) == 0


def test_elastic_policy_counts_every_resource_a_worker_needs():
    policy = ScalingPolicy(1, 8, {"CPU": 2.0, "GPU": 1.0})
    assert policy.workers_to_start({"CPU": 16.0, "GPU": 3.0}) == 3
    assert policy.workers_to_start({"CPU": 5.0, "GPU": 8.0}) == 2


def test_a_fixed_group_never_resizes():
    assert ScalingPolicy(4, 4, {"CPU": 1.0}).resize_to(4, {"CPU": 100.0}) == 0


def test_scaling_config_takes_min_max_as_ray_train_v2():
    config = ScalingConfig(num_workers=(2, 4))
    proto = config.to_proto()
    assert (proto.num_workers, proto.min_workers) == (4, 2)
    assert ScalingConfig.from_proto(proto).num_workers == (2, 4)
    assert ScalingConfig(num_workers=(3, 3)).num_workers == 3


@pytest.mark.parametrize("bad", [(0, 2), (3, 2), (1, 2, 3), (1.5, 2), "2"])
def test_bad_elastic_bounds_name_the_field(bad):
    with pytest.raises(InvalidArgumentError) as info:
        ScalingConfig(num_workers=bad)
    assert info.value.field == "scaling_config.num_workers"


def test_min_workers_on_the_wire_is_checked():
    with pytest.raises(InvalidArgumentError) as info:
        ScalingConfig.from_proto(common_pb2.ScalingConfig(num_workers=2, min_workers=3))
    assert info.value.field == "scaling_config.min_workers"


def test_an_elastic_group_carries_on_after_a_lost_worker_once_per_checkpoint():
    lost = AttemptOutcome(error=ERROR, worker_lost=True, elastic=True, progressed=True)
    decision = after_attempt(lost, 0, FailurePolicy(FailureConfig(max_failures=0)))
    assert (decision.run_state, decision.restarts, decision.counts_as_failure) == (RESTARTING, True, False)
    again = after_attempt(
        AttemptOutcome(error=ERROR, worker_lost=True, elastic=True, progressed=False),
        0,
        FailurePolicy(FailureConfig(max_failures=0)),
    )
    assert (again.run_state, again.counts_as_failure) == (FAILED, True)


def test_a_fixed_group_counts_a_lost_worker_as_a_failure():
    lost = AttemptOutcome(error=ERROR, worker_lost=True, elastic=False, progressed=True)
    assert after_attempt(lost, 0, FailurePolicy(FailureConfig(max_failures=0))).run_state == FAILED


def test_the_states_after_an_attempt_carry_their_data():
    policy = FailurePolicy(FailureConfig(max_failures=1))
    restart = after_attempt(AttemptOutcome(error=ERROR, resize_to=3), 0, policy)
    assert restart == Restarting("restart 1 after failure: rank 1 raised RuntimeError: boom", "failure", 3)
    assert (restart.cause, restart.resize_to) == ("failure", 3)
    failed = after_attempt(AttemptOutcome(error=ERROR), 1, policy)
    assert isinstance(failed, Failed) and failed.error == ERROR and failed.is_terminal
    lost = after_attempt(AttemptOutcome(error=ERROR, worker_lost=True, elastic=True, progressed=True), 0, policy)
    assert isinstance(lost, Restarting) and lost.cause == "lost_worker" and not lost.counts_as_failure
    resize = after_attempt(AttemptOutcome(resize_to=4, world_size=2), 0, policy)
    assert resize == Resizing(2, 4) and (resize.cause, resize.resize_to, resize.restarts) == ("resize", 4, True)
    assert after_attempt(AttemptOutcome(), 0, policy) == Succeeded()
    assert after_attempt(AttemptOutcome(suspended=True), 0, policy) == Suspended()
    assert not Suspended().restarts and not Suspended().is_terminal
    cancelled = after_attempt(AttemptOutcome(cancelled=True, cancel_reason="deadline passed"), 0, policy)
    assert cancelled == Cancelled("deadline passed") and cancelled.run_state == CANCELLED


def test_the_states_within_an_attempt_show_their_public_state_and_reason():
    assert Initializing().run_state == PENDING
    waiting = Reserving(0, 2, {"CPU": 1.0}, {"CPU": 0.5})
    assert waiting.run_state == PENDING
    assert waiting.reason == "waiting for resources: 2 workers x {'CPU': 1.0} (cluster has {'CPU': 0.5} available)"
    assert Reserving(1, 2, {}, {}).run_state == RESTARTING  # a later group is a restart
    fitting = FittingPreprocessor(1, "train", {"CPU": 0.0})
    assert fitting.run_state == RESTARTING and fitting.reason.startswith("fitting the preprocessor on dataset 'train'")
    assert (Starting(2).run_state, Starting(2).reason) == (STARTING, "")
    assert Starting(2, 4, elastic=True).reason == "2 of up to 4 workers"
    assert Starting(4, warm=True).reason == "reusing warm workers"
    assert (Running(2).run_state, Running(2).reason) == (RUNNING, "")
    stalled = Stalled((1, 2), (0,), 61.0)
    assert stalled.run_state == RUNNING and stalled.reason.startswith("ranks 1, 2 still running 61 s after ranks 0")
    assert not Failed("the store is gone").counts_as_failure  # not a worker's failure


def test_signals_hold_cancel_and_suspend_for_the_run_and_the_rest_for_one_attempt():
    signals = Signals(cancel=True, worker_lost=True, resize_to=3, stop_reached=True)
    assert signals.stop_requested and Signals(suspend=True).stop_requested and not Signals().stop_requested
    signals.next_attempt()
    assert (signals.cancel, signals.worker_lost, signals.resize_to) == (True, False, 0)


def test_an_elastic_group_carries_on_smaller_after_a_loss_then_grows_when_safe():
    scaling = ScalingPolicy(1, 4, {"CPU": 1.0})
    memory = LossMemory()
    assert memory.progressed(0)
    assert group_size(scaling, {"CPU": 3.0}, memory, 0, 0.0) == 3
    memory.note_loss(committed=2, now=100.0)
    assert not memory.progressed(2) and memory.progressed(3)
    # Ray still counts the lost node's CPUs: the next group is one smaller than the last.
    assert group_size(scaling, {"CPU": 4.0}, memory, 3, 110.0) == 2
    assert resize_target(scaling, 2, {"CPU": 2.0}, memory, 110.0) == 0
    later = 100.0 + RESIZE_AFTER_LOSS_S
    assert resize_target(scaling, 2, {"CPU": 2.0}, memory, later) == 4
    memory.grow_to = 4
    assert group_size(scaling, {"CPU": 0.0}, memory, 2, later) == 4 and memory.grow_to == 0
    assert group_size(ScalingPolicy(2, 2, {"CPU": 1.0}), {}, memory, 2, later) == 2
    assert resize_target(ScalingPolicy(2, 2, {"CPU": 1.0}), 2, {"CPU": 8.0}, LossMemory(), 0.0) == 0


def test_stop_criteria_and_stale_reports():
    assert stop_reached({"epoch": 3}, {"epoch": 3, "loss": 0.1})
    assert not stop_reached({"epoch": 3}, {"epoch": 2}) and not stop_reached({"epoch": 3}, {"epoch": "x"})
    assert not stop_reached({"epoch": 3}, {})
    assert is_stale(0, 1, RUNNING) and is_stale(1, 1, SUCCEEDED) and not is_stale(1, 1, RUNNING)
