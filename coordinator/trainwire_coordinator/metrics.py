"""Prometheus metrics of the coordinator (``--metrics-port``), in its own registry.

- ``trainwire_runs{state}``: runs this coordinator drives, by state (a gauge read at scrape time);
- ``trainwire_runs_finished_total{state}``: runs that ended SUCCEEDED, FAILED or CANCELLED;
- ``trainwire_worker_reports_total``: training reports received (``rate()`` gives reports per second);
- ``trainwire_checkpoint_commit_duration_seconds``: manifest, index and retention of one commit;
- ``trainwire_worker_failures_total{counted}``: worker errors, and whether they counted
  against ``FailureConfig.max_failures`` (an elastic group's lost worker does not);
- ``trainwire_run_restarts_total{reason}``: new worker groups after a failure, a resize or
  a coordinator restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from trainwire_core.v1 import common_pb2

COMMIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _RunsByState(Collector):
    def __init__(self, states: Callable[[], Iterable[int]]) -> None:
        self._states = states

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = dict.fromkeys(("PENDING", "STARTING", "RUNNING", "RESTARTING"), 0)
        for state in self._states():
            name = common_pb2.RunState.Name(state)
            if name in counts:
                counts[name] += 1
        family = GaugeMetricFamily("trainwire_runs", "Runs this coordinator drives, by state", labels=["state"])
        for name, count in counts.items():
            family.add_metric([name], count)
        yield family


class CoordinatorMetrics:
    """The coordinator's counters and histograms.

    Args:
        active_states: Returns the state of every run this coordinator drives.
    """

    def __init__(self, active_states: Callable[[], Iterable[int]] = tuple) -> None:
        self.registry = CollectorRegistry()
        self.runs_finished = Counter(
            "trainwire_runs_finished", "Runs that ended, by final state", ["state"], registry=self.registry
        )
        self.reports = Counter("trainwire_worker_reports", "Training reports received", registry=self.registry)
        self.commit_seconds = Histogram(
            "trainwire_checkpoint_commit_duration_seconds",
            "Time to commit one checkpoint (manifest, index, retention)",
            buckets=COMMIT_BUCKETS_S,
            registry=self.registry,
        )
        self.worker_failures = Counter(
            "trainwire_worker_failures",
            "Worker errors, by whether they counted against max_failures",
            ["counted"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "trainwire_run_restarts", "New worker groups of running runs, by reason", ["reason"], registry=self.registry
        )
        self.registry.register(_RunsByState(active_states))
