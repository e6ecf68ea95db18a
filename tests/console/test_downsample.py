"""The console's curves: min/max buckets keep a series' shape in at most two points a pixel."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from trainwire_console.downsample import minmax


def test_a_short_series_is_kept_whole_less_its_gaps():
    xs = np.arange(5, dtype=float)
    ys = np.array([1.0, np.nan, 3.0, 4.0, 5.0])
    sx, sy = minmax(xs, ys, 100)
    assert sx.tolist() == [0, 2, 3, 4] and sy.tolist() == [1, 3, 4, 5]


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=3000), st.integers(1, 400))
def test_buckets_keep_every_extreme_in_order(values, width):
    ys = np.asarray(values)
    xs = np.arange(len(ys), dtype=float)
    sx, sy = minmax(xs, ys, width)
    assert len(sx) <= max(2 * width, len(ys))
    assert np.all(np.diff(sx) > 0)  # still in x order, no point twice
    assert sy.min() == ys.min() and sy.max() == ys.max()  # spikes survive


def test_a_hundred_thousand_reports_cut_to_a_chart_quickly():
    ys = np.random.default_rng(0).normal(size=100_000)
    start = time.perf_counter()
    sx, _ = minmax(np.arange(len(ys), dtype=float), ys, 1000)
    assert len(sx) <= 2000 and time.perf_counter() - start < 0.5
