"""The runs list's sparklines: each run's score metric over its reports, its best and last value.

An ended run's history never changes: it is read once (WatchRunBatched to its end) and only the
sparkline is kept. A live run's comes from its feed, which the console follows anyway while the
run's page is open, and which then keeps the sparkline current.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from trainwire.client import TERMINAL_STATES, CoordinatorClient
from trainwire_console.feeds import Feeds, RunFeed
from trainwire_console.scores import score_config, score_metric, sparkline
from trainwire_core.v1 import coordinator_pb2

# Ended runs' sparklines kept at once (a few hundred bytes each).
MAX_KEPT = 4096
# How long a live run's sparkline waits for the history its feed is reading.
LIVE_WAIT_S = 2.0


def feed_sparkline(feed: RunFeed, run: coordinator_pb2.Run) -> dict[str, Any]:
    """The sparkline of the run's score metric from what ``feed`` holds."""
    score_attribute, order = score_config(run)
    reported, _, _ = feed.history("")
    metric = score_metric(score_attribute, reported)
    _, xs, ys = feed.history(metric)
    body: dict[str, Any] = {"metric": metric, "score_attribute": score_attribute, "order": order}
    return body | sparkline(xs, ys, order, bool(score_attribute))


class Sparklines:
    """Sparklines of runs, ended ones kept.

    Args:
        feeds: The console's feeds, which live runs' sparklines read.
    """

    def __init__(self, feeds: Feeds) -> None:
        self.feeds = feeds
        self._kept: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, run: coordinator_pb2.Run, client: CoordinatorClient) -> dict[str, Any]:
        """The run's sparkline, read with ``client`` (whose token has just read the run)."""
        if run.state not in TERMINAL_STATES:
            feed = self.feeds.get(run, client)
            feed.caught_up.wait(LIVE_WAIT_S)
            return feed_sparkline(feed, run)
        with self._lock:
            kept = self._kept.get(run.run_id)
            if kept is not None:
                self._kept.move_to_end(run.run_id)
                return kept
        # Read into a feed of its own, dropped after: the run's reports stay out of the console's memory.
        feed = RunFeed(run.run_id, run.created_at.ToMicroseconds() / 1e6)
        for event in client.watch_run(run.run_id, 0):
            if event.WhichOneof("kind") == "metrics":
                feed.add(event)
        body = feed_sparkline(feed, run)
        with self._lock:
            self._kept[run.run_id] = body
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return body
