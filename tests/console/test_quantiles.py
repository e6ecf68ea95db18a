"""p99 latencies from the predictors' Prometheus histograms: the quantile and the sum over replicas."""

from __future__ import annotations

import contextlib
import math
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from trainwire_console.backend import ConsoleBackend, metrics_urls
from trainwire_console.quantiles import (
    REQUEST_DURATION,
    duration_buckets,
    histogram_quantile,
    p99_ms,
    sum_buckets,
)

INF = math.inf


def test_interpolates_inside_the_bucket():
    # 100 observations: 10 up to 1, 80 more up to 2, 10 more up to 4.
    buckets = {1.0: 10, 2.0: 90, 4.0: 100, INF: 100}
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.0 + (50 - 10) / 80)
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.5)  # the first bucket starts at 0
    assert histogram_quantile(0.99, buckets) == pytest.approx(2.0 + 2.0 * 9 / 10)
    assert histogram_quantile(1.0, buckets) == pytest.approx(4.0)
    assert histogram_quantile(0.0, buckets) == 0.0


def test_the_inf_bucket_gives_the_highest_finite_bound():
    assert histogram_quantile(0.99, {1.0: 10, 2.0: 20, INF: 100}) == 2.0


def test_what_prometheus_answers_at_the_edges():
    assert histogram_quantile(0.5, {1.0: 0, INF: 0}) is None  # no observations
    assert histogram_quantile(0.5, {1.0: 3, 2.0: 4}) is None  # no +Inf bucket
    assert histogram_quantile(0.5, {INF: 4}) is None  # no finite bound
    assert histogram_quantile(-0.1, {1.0: 1, INF: 1}) == -INF
    assert histogram_quantile(1.1, {1.0: 1, INF: 1}) == INF
    # Counts that dip (replicas scraped at different moments) are evened out, as Prometheus does.
    assert histogram_quantile(0.5, {1.0: 10, 2.0: 8, INF: 20}) == histogram_quantile(0.5, {1.0: 10, 2.0: 10, INF: 20})


@st.composite
def histograms(draw: st.DrawFn) -> dict[float, float]:
    bounds = draw(
        st.lists(
            st.floats(min_value=1e-3, max_value=1e7, allow_nan=False, allow_infinity=False),
            min_size=1,
            max_size=20,
            unique=True,
        )
    )
    per_bucket = draw(st.lists(st.integers(0, 1000), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    cumulative, total = {}, 0
    for bound, count in zip([*sorted(bounds), INF], per_bucket, strict=True):
        total += count
        cumulative[bound] = total
    return cumulative


@given(histograms(), st.floats(0, 1), st.floats(0, 1))
def test_monotone_in_q_and_within_the_buckets_bounds(buckets, q1, q2):
    low, high = sorted((q1, q2))
    a, b = histogram_quantile(low, buckets), histogram_quantile(high, buckets)
    if buckets[INF] == 0:
        assert a is None and b is None
        return
    assert a is not None and b is not None
    assert a <= b
    finite = sorted(le for le in buckets if le != INF)
    for q, value in ((low, a), (high, b)):
        # The bucket the rank falls in: its bounds hold the answer (the +Inf one: its lower bound).
        rank = q * buckets[INF]
        upper = next((le for le in finite if buckets[le] >= rank), None)
        if upper is None:
            assert value == finite[-1]
            continue
        lower = max((le for le in finite if le < upper), default=0.0)
        assert lower <= value <= upper


def _exposition(observations_us: dict[tuple[str, str], list[float]]) -> str:
    """A predictor's ``GET /metrics`` text with these request durations (its own histogram and buckets)."""
    from trainwire_predictor.metrics import DURATION_BUCKETS_US

    registry = CollectorRegistry()
    histogram = Histogram(REQUEST_DURATION, "", ("model", "version"), registry=registry, buckets=DURATION_BUCKETS_US)
    for labels, values in observations_us.items():
        for value in values:
            histogram.labels(*labels).observe(value)
    return generate_latest(registry).decode()


def test_two_replicas_are_summed_per_model_version_and_bound():
    one = _exposition({("m", "v1"): [300.0] * 99, ("m", "v2"): [40.0]})
    two = _exposition({("m", "v1"): [3_000.0] * 3})
    each = [duration_buckets(one), duration_buckets(two)]
    summed = sum_buckets(each)
    assert summed[("m", "v1")][250.0] == 0 and summed[("m", "v1")][500.0] == 99
    assert summed[("m", "v1")][5_000.0] == 102 and summed[("m", "v1")][INF] == 102
    assert summed[("m", "v2")][50.0] == 1
    p99 = p99_ms([one, two])
    # Rank 0.99 * 102 = 100.98: 1.98 of the 3 in (2500, 5000] us.
    assert p99[("m", "v1")] == pytest.approx((2_500 + 2_500 * 1.98 / 3) / 1e3)
    assert p99[("m", "v2")] == pytest.approx(0.99 * 50 / 1e3)
    # One replica alone: its p99 sits in its own bucket.
    assert p99_ms([one])[("m", "v1")] == pytest.approx((250 + 250 * (0.99 * 99) / 99) / 1e3)


def test_a_text_that_is_not_an_exposition_is_refused():
    with pytest.raises(ValueError):
        duration_buckets("<html>not metrics</html>\n")


@contextlib.contextmanager
def socket_closed_port() -> Iterator[int]:
    """A loopback port that nothing listens on (bound, not listening) while the block runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


class _Metrics(BaseHTTPRequestHandler):
    text = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.text.encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_replica_whose_metrics_fail_is_left_out(caplog):
    text = _exposition({("m", "v1"): [300.0] * 10})
    handler = type("Handler", (_Metrics,), {"text": text})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    broken = type("Broken", (_Metrics,), {"text": "<html>oops</html>\n"})
    bad = ThreadingHTTPServer(("127.0.0.1", 0), broken)
    threading.Thread(target=bad.serve_forever, daemon=True).start()
    with socket_closed_port() as closed:
        urls = [
            f"http://127.0.0.1:{server.server_port}/metrics",
            f"http://127.0.0.1:{bad.server_port}/metrics",
            f"http://127.0.0.1:{closed}/metrics",
            f"http://127.0.0.1:{server.server_port}/nothing",
        ]
        backend = ConsoleBackend("127.0.0.1:1", predictor_metrics=urls)
        try:
            p99 = backend.p99_latencies_ms()
        finally:
            backend.close()
            server.shutdown()
            bad.shutdown()
    assert p99 == {("m", "v1"): pytest.approx((250 + 250 * 9.9 / 10) / 1e3)}
    assert sum("left out of p99" in r.getMessage() for r in caplog.records) == 3


def test_without_metrics_urls_there_is_no_p99():
    backend = ConsoleBackend("127.0.0.1:1")
    try:
        assert backend.p99_latencies_ms() == {}
    finally:
        backend.close()


def test_a_dns_entry_stands_for_every_address():
    assert metrics_urls(["http://a:8002/metrics", "dns:///127.0.0.1:8002"]) == [
        "http://a:8002/metrics",
        "http://127.0.0.1:8002/metrics",
    ]
