"""Prometheus metrics of the predictor, named after Triton's ``nv_inference_*`` (``--metrics-port``).

Served over plain HTTP (``GET /metrics``, prometheus_client's text exposition)
on the predictor's host, as Triton serves its metrics port; the bearer token
guards the inference service only. Every metric has ``model`` (the run's name,
else its id) and ``version`` (the checkpoint id) labels:

- ``nv_inference_request_success`` / ``nv_inference_request_failure``: requests
  (counters; a request for a model that is not found counts for no model);
- ``nv_inference_count``: inferences, one per row of a successful request;
- ``nv_inference_exec_count``: model calls (batched requests share one);
- ``nv_inference_request_duration_us``: receipt to response of successful requests;
- ``nv_inference_queue_duration_us``: waiting for a model call;
- ``nv_inference_compute_input_duration_us`` / ``..._infer_...`` / ``..._output_...``:
  decoding, the model's predict, encoding (per request);
- ``nv_inference_batch_size``: rows per model call.

Language models' generation, per tenant (a token's name; "" for anonymous callers), with a
``tenant`` label beside ``model`` and ``version``, read from the decode engines at each scrape:

- ``trainwire_generate_waiting`` / ``trainwire_generate_running``: requests waiting for a
  decode slot and holding one (gauges);
- ``trainwire_generate_tokens``: tokens generated (counter);
- ``trainwire_generate_prefix_cache_bytes`` and ``trainwire_generate_prefix_tokens`` /
  ``..._prefix_hit_tokens``: the prefix cache's size, and prompt tokens looked up and found in it
  (per model).

Durations are histograms in microseconds (so ``_sum`` is Triton's cumulative
counter of the same name, and ``_bucket`` gives quantiles). Counters follow the
Prometheus convention and are exposed with a ``_total`` suffix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainwire_predictor.models import ModelRef
from trainwire_predictor.statistics import Timing, model_labels

LABELS = ("model", "version")
# Microseconds: 50 µs to 10 s.
DURATION_BUCKETS_US = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000)
DURATION_BUCKETS_US += (1_000_000, 2_500_000, 5_000_000, 10_000_000)
BATCH_BUCKETS = tuple(2**i for i in range(14))  # 1 .. 8192 rows


class _Children:
    """One model version's labelled metrics, looked up once."""

    __slots__ = (
        "success",
        "failure",
        "count",
        "exec_count",
        "request_us",
        "queue_us",
        "input_us",
        "infer_us",
        "output_us",
        "batch_size",
    )

    def __init__(self, metrics: PredictorMetrics, labels: tuple[str, str]) -> None:
        self.success = metrics.request_success.labels(*labels)
        self.failure = metrics.request_failure.labels(*labels)
        self.count = metrics.inference_count.labels(*labels)
        self.exec_count = metrics.exec_count.labels(*labels)
        self.request_us = metrics.request_duration.labels(*labels)
        self.queue_us = metrics.queue_duration.labels(*labels)
        self.input_us = metrics.compute_input_duration.labels(*labels)
        self.infer_us = metrics.compute_infer_duration.labels(*labels)
        self.output_us = metrics.compute_output_duration.labels(*labels)
        self.batch_size = metrics.batch_size.labels(*labels)


class PredictorMetrics:
    """The predictor's metrics in a registry of their own (a Recorder: see statistics.py)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...] = DURATION_BUCKETS_US) -> Histogram:
            return Histogram(name, doc, LABELS, registry=r, buckets=buckets)

        self.request_success = counter("nv_inference_request_success", "Successful inference requests")
        self.request_failure = counter("nv_inference_request_failure", "Failed inference requests")
        self.inference_count = counter("nv_inference_count", "Inferences performed (one per row)")
        self.exec_count = counter("nv_inference_exec_count", "Model executions (batched requests share one)")
        self.request_duration = histogram(
            "nv_inference_request_duration_us", "End-to-end duration of successful requests (us)"
        )
        self.queue_duration = histogram("nv_inference_queue_duration_us", "Time requests wait for a model call (us)")
        self.compute_input_duration = histogram(
            "nv_inference_compute_input_duration_us", "Time decoding request tensors (us)"
        )
        self.compute_infer_duration = histogram(
            "nv_inference_compute_infer_duration_us", "Time in the model's predict (us)"
        )
        self.compute_output_duration = histogram(
            "nv_inference_compute_output_duration_us", "Time encoding response tensors (us)"
        )
        self.batch_size = histogram("nv_inference_batch_size", "Rows per model execution", BATCH_BUCKETS)
        self._children: dict[tuple[str, str], _Children] = {}
        self._lock = threading.Lock()

    def _of(self, ref: ModelRef) -> _Children:
        children = self._children.get(ref.key)
        if children is None:
            with self._lock:
                children = self._children.get(ref.key)
                if children is None:
                    children = self._children[ref.key] = _Children(self, model_labels(ref))
        return children

    def watch_generation(self, engines: Callable[[], Sequence[tuple[ModelRef, Any]]]) -> Collector:
        """Exposes each decode engine's tenants at every scrape (``engines``: the running ones, with their models).

        Returns:
            The collector (a worker of a group publishes it: workers.GenerationPublisher).
        """
        collector = _GenerationCollector(engines)
        self.registry.register(collector)
        return collector

    def success(self, ref: ModelRef, timing: Timing, duration_ns: int) -> None:
        c = self._of(ref)
        c.success.inc()
        c.count.inc(timing.rows)
        c.request_us.observe(duration_ns / 1e3)
        c.queue_us.observe(timing.queue_ns / 1e3)
        c.input_us.observe(timing.input_ns / 1e3)
        c.infer_us.observe(timing.infer_ns / 1e3)
        c.output_us.observe(timing.output_ns / 1e3)

    def failure(self, ref: ModelRef, duration_ns: int) -> None:
        self._of(ref).failure.inc()

    def execution(self, ref: ModelRef, rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        c = self._of(ref)
        c.exec_count.inc()
        c.batch_size.observe(rows)


class _GenerationCollector(Collector):
    """Per-tenant generation metrics, read from the engines when scraped (nothing to update per token)."""

    def __init__(self, engines: Callable[[], Sequence[tuple[ModelRef, Any]]]) -> None:
        self.engines = engines

    def collect(self) -> Iterator[Metric]:
        labels = [*LABELS, "tenant"]
        waiting = GaugeMetricFamily(
            "trainwire_generate_waiting", "Generations waiting for a decode slot", labels=labels
        )
        running = GaugeMetricFamily("trainwire_generate_running", "Generations holding a decode slot", labels=labels)
        tokens = CounterMetricFamily("trainwire_generate_tokens", "Tokens generated", labels=labels)
        cache_bytes = GaugeMetricFamily(
            "trainwire_generate_prefix_cache_bytes", "Bytes of prompt prefixes' keys and values kept", labels=LABELS
        )
        looked = CounterMetricFamily(
            "trainwire_generate_prefix_tokens", "Prompt tokens looked up in the prefix cache", labels=LABELS
        )
        hits = CounterMetricFamily(
            "trainwire_generate_prefix_hit_tokens", "Prompt tokens found in the prefix cache", labels=LABELS
        )
        for ref, engine in self.engines():
            model = list(model_labels(ref))
            for tenant, (w, r, t) in sorted(engine.tenants().items()):
                waiting.add_metric([*model, tenant], w)
                running.add_metric([*model, tenant], r)
                tokens.add_metric([*model, tenant], t)
            cache = engine.prefix_cache
            if cache is not None:
                cache_bytes.add_metric(model, cache.bytes)
                looked.add_metric(model, cache.lookup_tokens)
                hits.add_metric(model, cache.hit_tokens)
        yield from (waiting, running, tokens, cache_bytes, looked, hits)

    def describe(self) -> list[Metric]:
        return []  # collected at each scrape only: the registry does not call collect() on register
