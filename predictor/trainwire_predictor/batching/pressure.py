"""What the batcher measures to decide whether a call waits: the loop's load, a model's gathers, its peak."""

from __future__ import annotations

import time

# Waiting for more requests to join an inline call: how long; how busy the event loop must be
# (the share of time its thread wanted a core, measured over windows of LOOP_WINDOW_NS); the waits in a row that
# bring no company before a model stops waiting, and how often it then tries again.
GATHER_WAIT_S = 0.001  # uvloop's timers count whole milliseconds
GATHER_LOOP_BUSY = 0.75
GATHER_MISSES = 3
GATHER_PROBE_EVERY = 64
# Each probe that finds no company doubles the calls to the next, up to this many: a lone caller
# on a busy machine (its loop counted busy for want of a core) has one call in thousands wait.
GATHER_PROBE_MAX = 4096
# Calls that find this many requests on average without waiting do not wait; every so many calls
# go without waiting, to keep that average current.
GATHER_NATURAL = 1.5
GATHER_SAMPLE_EVERY = 16
LOOP_WINDOW_NS = 50_000_000


class _LoopLoad:
    """How busy the event loop thread is: the share of the last window it wanted a core.

    On Linux that is the time it ran plus the time it waited in the run queue (the thread's
    ``schedstat``), so a loop on a machine short of cores still counts as busy; elsewhere its
    CPU time alone.
    """

    __slots__ = ("since_ns", "used_ns", "busy")

    def __init__(self) -> None:
        self.since_ns, self.used_ns, self.busy = time.perf_counter_ns(), self._used_ns(), 0.0

    @staticmethod
    def _used_ns() -> int:
        try:
            with open("/proc/thread-self/schedstat", "rb") as f:
                ran, waited = f.read().split()[:2]
            return int(ran) + int(waited)
        except (OSError, ValueError):
            return time.thread_time_ns()

    def update(self) -> float:
        """The last window's share of time the loop wanted a core (called on the loop thread)."""
        now = time.perf_counter_ns()
        if now - self.since_ns >= LOOP_WINDOW_NS:
            used = self._used_ns()
            self.busy = (used - self.used_ns) / (now - self.since_ns)
            self.since_ns, self.used_ns = now, used
        return self.busy


class _Gather:
    """Whether waiting for more requests would pay for one model's inline calls.

    It would not where calls already find company without waiting (a REST front end reads
    several connections' requests in one loop turn), nor where waits bring none.
    """

    __slots__ = ("misses", "calls", "natural", "probe_every")

    def __init__(self) -> None:
        self.misses = 0
        self.calls = 0
        self.probe_every = GATHER_PROBE_EVERY
        self.natural = 1.0  # requests per call of the calls that did not wait (a moving average)

    def should_wait(self) -> bool:
        """Called once per inline call of a busy loop; every ``GATHER_SAMPLE_EVERY``-th call goes as it is."""
        self.calls += 1
        if self.calls % GATHER_SAMPLE_EVERY == 0 or self.natural >= GATHER_NATURAL:
            return False
        # (a probe is never a sample call: probe_every is a multiple of GATHER_SAMPLE_EVERY)
        return self.misses < GATHER_MISSES or self.calls % self.probe_every == 1

    def went(self, requests: int) -> None:
        """A call that did not wait went with this many requests."""
        self.natural = 0.9 * self.natural + 0.1 * requests

    def result(self, company: bool) -> None:
        """After a wait: whether other requests joined the call."""
        if company:
            self.misses, self.probe_every = 0, GATHER_PROBE_EVERY
            return
        self.misses += 1
        if self.misses > GATHER_MISSES:  # a probe that found no company
            self.probe_every = min(GATHER_PROBE_MAX, 2 * self.probe_every)


# How long a model's peak of rows held at once is remembered (two windows of this).
PEAK_WINDOW_NS = 1_000_000_000


class _Peak:
    """The most rows a model has held at once (queued and in calls) within the last one to two windows."""

    __slots__ = ("held", "current", "previous", "since_ns", "freed_ns")

    def __init__(self) -> None:
        self.held = 0
        self.current = self.previous = 0
        self.since_ns = 0
        self.freed_ns = 0  # when the last call ended

    def add(self, rows: int, now: int) -> None:
        self.held += rows
        if now - self.since_ns >= PEAK_WINDOW_NS:
            self.previous = self.current if now - self.since_ns < 2 * PEAK_WINDOW_NS else 0
            self.current, self.since_ns = 0, now
        self.current = max(self.current, self.held)

    @property
    def peak(self) -> int:
        return max(self.current, self.previous)
