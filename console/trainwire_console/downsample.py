"""Metric series cut down to what a chart can show: min/max per pixel bucket."""

from __future__ import annotations

import numpy as np


def minmax(xs: np.ndarray, ys: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``2 * width`` points of a series that draw as the whole series does at ``width`` pixels.

    Each of ``width`` equal slices of the points keeps its lowest and highest point, in their order,
    so spikes survive (an average would hide them). NaN values (reports without the metric) are dropped.
    """
    keep = ~np.isnan(ys)
    xs, ys = xs[keep], ys[keep]
    width = max(int(width), 1)
    if len(xs) <= 2 * width:
        return xs, ys
    edges = np.linspace(0, len(xs), width + 1).astype(np.int64)
    # Where in each slice its low and high are (the first of equal values).
    idx = np.empty(2 * width, dtype=np.int64)
    for k, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        segment = ys[a:b]
        lo, hi = a + int(np.argmin(segment)), a + int(np.argmax(segment))
        idx[2 * k], idx[2 * k + 1] = min(lo, hi), max(lo, hi)
    idx = np.unique(idx)
    return xs[idx], ys[idx]
