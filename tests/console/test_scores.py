"""What the console draws of a run's score, without a browser or services."""

from __future__ import annotations

import numpy as np

from trainwire_console.scores import kept_checkpoints, metric_order, run_scores, served_checkpoint_id, sparkline
from trainwire_core.v1 import common_pb2, coordinator_pb2


def _run(score: str = "", order: str = "") -> coordinator_pb2.Run:
    run = coordinator_pb2.Run(run_id="r1", name="r", state=common_pb2.SUCCEEDED)
    run.created_at.FromSeconds(1000)
    config = run.request.run_config.checkpoint_config
    config.checkpoint_score_attribute, config.checkpoint_score_order = score, order
    for index, loss in ((6, 0.1), (7, 0.2)):  # best first, as the coordinator lists them
        c = run.best_checkpoints.add(checkpoint_id=f"checkpoint_{index:06d}", index=index)
        c.metrics.update({"loss": loss})
        c.created_at.FromSeconds(1000 + index)
    run.latest_checkpoint.CopyFrom(run.best_checkpoints[1])
    run.latest_checkpoint.checkpoint_id, run.latest_checkpoint.index = "checkpoint_000010", 10
    run.latest_checkpoint.metrics.update({"loss": 0.5})
    return run


def test_the_score_attribute_leads_and_the_x_axis_metric_is_left_out():
    reported = ["accuracy", "training_iteration", "loss", "lr"]
    assert metric_order(reported, "loss", "training_iteration") == ["loss", "accuracy", "lr"]
    assert metric_order(reported, "loss", "time") == ["loss", "accuracy", "training_iteration", "lr"]
    # Without a score attribute the first reported metric leads (the step counter is never one).
    assert metric_order(["training_iteration", "b", "a"], "", "training_iteration") == ["b", "a"]


def test_the_best_checkpoint_is_served_with_a_score_attribute_else_the_latest():
    scored = _run("loss", "min")
    assert served_checkpoint_id(scored) == "checkpoint_000006"
    marks = {c["id"]: c for c in kept_checkpoints(scored, "loss")}
    assert [c["index"] for c in marks.values()] == [6, 7, 10]
    assert (marks["checkpoint_000006"]["best"], marks["checkpoint_000006"]["served"]) == (True, True)
    assert marks["checkpoint_000010"]["latest"] and not marks["checkpoint_000010"]["best"]
    assert marks["checkpoint_000006"]["value"] == 0.1 and marks["checkpoint_000006"]["t"] == 6
    unscored = _run()
    assert served_checkpoint_id(unscored) == "checkpoint_000010"
    body = run_scores(unscored, ["loss"])
    assert body["metric"] == "loss" and not any(c["best"] for c in body["checkpoints"])


def test_a_sparkline_keeps_the_best_and_last_value():
    xs = np.arange(1, 1001, dtype=float)
    ys = (xs - 600) ** 2
    ys[10] = np.nan
    line = sparkline(xs, ys, "min", True, points=40)
    assert len(line["points"]) <= 40 and line["best"] == 0 and line["last"] == 400**2
    assert [600.0, 0.0] in line["points"]  # the minimum survives the cut
    assert sparkline(xs, ys, "max", False)["best"] is None


def test_a_feeds_sparkline_follows_the_score_attribute_else_the_first_metric():
    from trainwire_console.feeds import RunFeed
    from trainwire_console.sparklines import feed_sparkline

    feed = RunFeed("r1", 1000.0)
    for i in range(1, 6):
        event = coordinator_pb2.RunEvent(event_id=i, run_id="r1")
        event.time.FromSeconds(1000 + i)
        event.metrics.report_index = i
        event.metrics.metrics.update({"training_iteration": i, "acc": i / 10, "loss": abs(i - 3.0)})
        feed.add(event)
    scored = feed_sparkline(feed, _run("loss", "min"))
    assert (scored["metric"], scored["best"], scored["last"]) == ("loss", 0.0, 2.0)
    assert scored["points"][2] == [3.0, 0.0]
    unscored = feed_sparkline(feed, _run())
    assert unscored["metric"] == "acc" and unscored["best"] is None and unscored["last"] == 0.5
