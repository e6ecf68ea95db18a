"""Quantiles of Prometheus histograms summed over the predictors' replicas (pure: text in, numbers out).

The predictors' ModelStatistics carry totals only; their ``nv_inference_request_duration_us``
histograms (``GET /metrics``) carry the distribution. Quantiles follow Prometheus'
``histogram_quantile``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

REQUEST_DURATION = "nv_inference_request_duration_us"

# Cumulative counts by upper bound (``le``), per (model, version).
Buckets = dict[float, float]


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q``-quantile of a histogram, as Prometheus' ``histogram_quantile`` computes it.

    Linear interpolation inside the bucket the rank falls in (the first bucket starts at 0);
    a rank in the ``+Inf`` bucket gives the highest finite bound.

    Args:
        q: The quantile, 0 to 1 (below: -inf; above: +inf, as Prometheus).
        buckets: Cumulative counts by upper bound; must hold ``+Inf``.

    Returns:
        The quantile, or None without observations, a ``+Inf`` bucket or a finite bound.
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    # Counts scraped from replicas at different moments can dip; Prometheus evens them out the same way.
    counts: list[float] = []
    for bound in bounds:
        counts.append(max(buckets[bound], counts[-1] if counts else 0.0))
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next(i for i, count in enumerate(counts) if count >= rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start = bounds[b - 1] if b > 0 else 0.0
    end = bounds[b]
    below = counts[b - 1] if b > 0 else 0.0
    inside = counts[b] - below
    if inside <= 0:
        return start
    # Clamped: rounding must not carry the result past the bucket (and break monotonicity in q).
    return min(max(start + (end - start) * ((rank - below) / inside), start), end)


def duration_buckets(text: str, metric: str = REQUEST_DURATION) -> dict[tuple[str, str], Buckets]:
    """The cumulative bucket counts of one histogram in a Prometheus text exposition.

    Args:
        text: A ``GET /metrics`` answer.
        metric: The histogram's name (without ``_bucket``).

    Returns:
        Counts by ``le`` per (``model``, ``version``) label pair.

    Raises:
        ValueError: The text is not a Prometheus exposition (or a bound is not a number).
    """
    out: dict[tuple[str, str], Buckets] = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric:
            continue
        for sample in family.samples:
            if sample.name != f"{metric}_bucket" or "le" not in sample.labels:
                continue
            key = (sample.labels.get("model", ""), sample.labels.get("version", ""))
            le = float(sample.labels["le"])
            buckets = out.setdefault(key, {})
            buckets[le] = buckets.get(le, 0.0) + sample.value
    return out


def sum_buckets(replicas: Iterable[Mapping[tuple[str, str], Buckets]]) -> dict[tuple[str, str], Buckets]:
    """Histograms' cumulative counts summed per (model, version, le) over replicas."""
    total: dict[tuple[str, str], Buckets] = {}
    for histograms in replicas:
        for key, buckets in histograms.items():
            summed = total.setdefault(key, {})
            for le, count in buckets.items():
                summed[le] = summed.get(le, 0.0) + count
    return total


def quantiles_ms(histograms: Mapping[tuple[str, str], Buckets], q: float = 0.99) -> dict[tuple[str, str], float]:
    """The ``q``-quantile in milliseconds per (model, version) of microsecond histograms (none without data)."""
    out = {}
    for key, buckets in histograms.items():
        value = histogram_quantile(q, buckets)
        if value is not None:
            out[key] = value / 1e3
    return out


def p99_ms(texts: Iterable[str]) -> dict[tuple[str, str], float]:
    """The p99 request duration in milliseconds per (model, version), over replicas' expositions."""
    return quantiles_ms(sum_buckets(duration_buckets(text) for text in texts))
