"""Each open run's events, read once from the coordinator (WatchRunBatched) and kept for every page that shows it.

A feed follows one run in a thread of its own (the blocking gRPC stream stays off the event loop):
it keeps the reports as columns (for curves), the timeline (state changes, failures, checkpoints),
and hands every new event to the pages following it. A hundred pages on one run cost one stream.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import struct_pb2

from trainwire.client import TERMINAL_STATES, CoordinatorClient
from trainwire_console.downsample import minmax
from trainwire_core.errors import TrainwireError
from trainwire_core.v1 import common_pb2, coordinator_pb2

# Runs kept in memory at once (least recently opened are dropped first).
MAX_FEEDS = 64
# The timeline's words for StateChange.cause (the controller's restart causes).
CAUSE_LABELS = {
    "failure": "restart after a failure",
    "lost_worker": "restart: a worker's node was lost",
    "resize": "resize",
    "coordinator_restart": "coordinator take-over",
}


def numbers_of(struct: struct_pb2.Struct, prefix: str = "") -> dict[str, float]:
    """The finite numeric metrics of a report, nested ones as ``a/b``.

    Read from the Struct directly: a run's whole history passes through here once, and
    ``struct_to_dict`` (json_format) costs several times more per report.
    """
    out: dict[str, float] = {}
    for key, value in struct.fields.items():
        kind = value.WhichOneof("kind")
        if kind == "number_value" and math.isfinite(value.number_value):
            out[prefix + key] = value.number_value
        elif kind == "struct_value":
            out.update(numbers_of(value.struct_value, f"{prefix}{key}/"))
    return out


def event_to_dict(event: coordinator_pb2.RunEvent, created_s: float) -> dict[str, Any]:
    """A RunEvent as the page takes it: ``kind``, ``event_id``, ``t`` (seconds since the run was created)."""
    kind = event.WhichOneof("kind")
    out: dict[str, Any] = {"event_id": event.event_id, "kind": kind, "t": event.time.ToMicroseconds() / 1e6 - created_s}
    if kind == "metrics":
        out["report_index"] = event.metrics.report_index
        out["metrics"] = numbers_of(event.metrics.metrics)
    elif kind == "state_change":
        out["state"] = common_pb2.RunState.Name(event.state_change.state)
        out["reason"] = event.state_change.reason
        # Why another attempt follows: a restart, a resize, a lost worker, a coordinator take-over.
        out["cause"] = CAUSE_LABELS.get(event.state_change.cause, event.state_change.cause)
    elif kind == "checkpoint":
        c = event.checkpoint
        out["checkpoint"] = {"id": c.checkpoint_id, "index": c.index, "size_bytes": c.size_bytes}
    elif kind == "worker_error":
        e = event.worker_error
        out["error"] = {"rank": e.world_rank, "attempt": e.attempt, "type": e.exc_type, "message": e.message}
    return out


@dataclass
class RunFeed:
    """One run's events so far, and the pages waiting for the next ones."""

    run_id: str
    created_s: float
    # Packed arrays, 8 bytes a value: 64 runs of 100,000 reports fit in a few hundred MB.
    event_ids: array = field(default_factory=lambda: array("q"))
    report_index: array = field(default_factory=lambda: array("d"))
    seconds: array = field(default_factory=lambda: array("d"))
    # metric -> one value per report (NaN where a report lacks it).
    columns: dict[str, array] = field(default_factory=dict)
    # Everything that is not a report, in order (state changes, failures, checkpoints).
    timeline: list[dict[str, Any]] = field(default_factory=list)
    last_event_id: int = 0
    ended: bool = False
    # The stream broke off (the coordinator went away): the next page to open the run reads it again.
    failed: bool = False
    # Set once the stream has sent what the coordinator had when the feed opened.
    caught_up: threading.Event = field(default_factory=threading.Event)
    _subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, event: coordinator_pb2.RunEvent) -> dict[str, Any]:
        item = event_to_dict(event, self.created_s)
        with self._lock:
            if item["kind"] == "metrics":
                n = len(self.event_ids)
                self.event_ids.append(event.event_id)
                self.report_index.append(float(item["report_index"]))
                self.seconds.append(item["t"])
                # New metrics join by name within a report (a Struct's keys come in no set order), so
                # "the first reported metric" means the same on every page.
                for name in sorted(item["metrics"].keys() - self.columns.keys()):
                    self.columns[name] = array("d", [math.nan]) * n
                for name, value in item["metrics"].items():
                    self.columns[name].append(float(value))
                for column in self.columns.values():
                    if len(column) < n + 1:
                        column.append(math.nan)
            else:
                self.timeline.append(item)
            self.last_event_id = event.event_id
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        return item

    def add_end(self) -> None:
        """Tells the following pages that the stream has ended (the run is over)."""
        with self._lock:
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    def subscribe(self, queue: asyncio.Queue) -> Callable[[], None]:
        """Sends every new event to ``queue`` (on the running loop); returns the call that stops it."""
        key = (asyncio.get_running_loop(), queue)
        with self._lock:
            self._subscribers.add(key)
        return lambda: self._subscribers.discard(key)

    def since(self, after_event_id: int) -> list[dict[str, Any]]:
        """The events after ``after_event_id`` that a reconnecting page missed (reports rebuilt from columns)."""
        with self._lock:
            start = bisect.bisect_right(self.event_ids, after_event_id)
            items = [
                {
                    "event_id": self.event_ids[i],
                    "kind": "metrics",
                    "t": self.seconds[i],
                    "report_index": int(self.report_index[i]),
                    "metrics": {k: c[i] for k, c in self.columns.items() if not math.isnan(c[i])},
                }
                for i in range(start, len(self.event_ids))
            ]
            items += [e for e in self.timeline if e["event_id"] > after_event_id]
        return sorted(items, key=lambda e: e["event_id"])

    def _array(self, key: str, values: array) -> np.ndarray:
        """A copy of ``values`` for numpy, made again only once reports have arrived (a run's pages share it)."""
        cached = self._arrays.get(key)
        if cached is None or len(cached) != len(values):
            # A copy: a view would keep the array from growing.
            cached = self._arrays[key] = np.frombuffer(values, dtype=np.float64).copy() if values else np.empty(0)
        return cached

    def history(self, metric: str) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The metrics reported so far (first reported first), and copies of ``metric``'s report
        indexes and values (empty where it was never reported)."""
        with self._lock:
            # Copies taken under the lock: a view of an array would keep it from growing.
            column = self.columns.get(metric)
            xs = np.array(self.report_index, dtype=np.float64)
            ys = np.array(column, dtype=np.float64) if column is not None else np.empty(0)
            return list(self.columns), xs[: len(ys)], ys

    def series(self, metrics: list[str], x: str, width: int) -> dict[str, Any]:
        """The chosen metrics against ``x`` (``training_iteration`` or ``time``), at most 2 points a pixel."""
        with self._lock:
            xs = self._array(f"x:{x}", self.report_index if x == "training_iteration" else self.seconds)
            columns = {m: self._array(f"m:{m}", self.columns[m]) for m in metrics if m in self.columns}
            last, count = self.last_event_id, len(self.event_ids)
            timeline = [e for e in self.timeline if e["event_id"] <= last]
        out = {}
        for name, ys in columns.items():
            sx, sy = minmax(xs, ys, width)
            out[name] = {"x": sx.tolist(), "y": sy.tolist()}
        return {"run_id": self.run_id, "last_event_id": last, "reports": count, "series": out, "timeline": timeline}


class Feeds:
    """The feeds of the runs pages have opened, each followed by one thread.

    A feed reads with the client of the page that opened it; every later page has shown that its
    own token may read the run (GetRun) before it is handed the feed.
    """

    def __init__(self) -> None:
        self._feeds: OrderedDict[str, RunFeed] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run: coordinator_pb2.Run, client: CoordinatorClient) -> RunFeed:
        """The run's feed, opened (and its thread started) on first use."""
        with self._lock:
            feed = self._feeds.get(run.run_id)
            if feed is not None and not feed.failed:
                self._feeds.move_to_end(run.run_id)
                return feed
            feed = RunFeed(run.run_id, run.created_at.ToMicroseconds() / 1e6)
            self._feeds[run.run_id] = feed
            while len(self._feeds) > MAX_FEEDS:
                self._feeds.popitem(last=False)
        target = run.last_report_index if run.state not in TERMINAL_STATES else None
        threading.Thread(
            target=self._follow, args=(feed, target, client), daemon=True, name=f"feed-{run.run_id}"
        ).start()
        return feed

    def _follow(self, feed: RunFeed, target_report: int | None, client: CoordinatorClient) -> None:
        """Reads the run's stream to its end; marks the feed caught up once it holds what the run had."""
        if target_report == 0:
            feed.caught_up.set()
        try:
            for event in client.watch_run(feed.run_id, feed.last_event_id):
                item = feed.add(event)
                if target_report and item["kind"] == "metrics" and item["report_index"] >= target_report:
                    feed.caught_up.set()
        except TrainwireError:
            feed.failed = True
        finally:
            feed.ended = True
            feed.caught_up.set()
            feed.add_end()
