"""The timeline's state changes say why another attempt follows: a restart, a resize, a take-over."""

from __future__ import annotations

from trainwire_console.feeds import event_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2


def test_state_changes_carry_their_cause_in_the_timelines_words():
    def change(cause: str) -> dict:
        state = coordinator_pb2.StateChange(state=common_pb2.RESTARTING, reason="why", cause=cause)
        return event_to_dict(coordinator_pb2.RunEvent(event_id=3, state_change=state), 0.0)

    assert change("coordinator_restart")["cause"] == "coordinator take-over"
    assert change("resize")["cause"] == "resize"
    assert change("lost_worker")["cause"] == "restart: a worker's node was lost"
    assert change("")["cause"] == ""
    assert change("something_new")["cause"] == "something_new"  # a cause the console does not know yet
    assert change("resize")["state"] == "RESTARTING" and change("resize")["reason"] == "why"
