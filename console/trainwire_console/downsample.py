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
    n = len(xs)
    if n <= 2 * width:
        return xs, ys
    starts = np.linspace(0, n, width + 1).astype(np.int64)[:-1]
    bucket = np.repeat(np.arange(width), np.diff(np.append(starts, n)))
    # The first point of each slice that equals the slice's low (and high): vectorised, O(n).
    lows = np.minimum.reduceat(ys, starts)[bucket] == ys
    highs = np.maximum.reduceat(ys, starts)[bucket] == ys
    low_at = np.unique(bucket[lows], return_index=True)[1]
    high_at = np.unique(bucket[highs], return_index=True)[1]
    idx = np.union1d(np.flatnonzero(lows)[low_at], np.flatnonzero(highs)[high_at])
    return xs[idx], ys[idx]
