"""What a fitted preprocessor and a compiled forest change in one 32-row in-process predict.

1. ``XGBoostPredictor.predict`` on 32 rows: without a preprocessor, with a fitted
   ``StandardScaler`` through ``transform_batch`` (the path before vectorising), and
   with the same scaler as numpy (``trainwire.preprocessor_transforms``); the ratios
   to the plain call side by side (issue 8's target: the scaled model at most 1.2x).
2. One 32-row booster call: XGBoost's ``inplace_predict`` against the same booster
   compiled with Treelite + TL2cgen (``trainwire_predictor.compiled_trees``), and the
   largest difference of their outputs.

The breast-cancer data (30 features), 10 rounds of depth 3, one thread, as in the
predictor tests.

    .venv/bin/python bench/preprocessor_overhead.py [--rows 32] [--calls 300] [--rounds 25]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any


def per_call_us(fns: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per call of each function: the best of ``rounds`` means of ``calls`` calls.

    The functions take turns within each round, so load from elsewhere falls on all of them
    alike, and the best round is the one least disturbed by it.
    """
    best = {name: float("inf") for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            n = max(10, calls // 20) if name.startswith("slow:") else calls
            started = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - started) / n * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--calls", type=int, default=300, help="calls per round of each function")
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()

    import numpy as np
    import ray
    import ray.data
    import xgboost
    from ray.data.preprocessors import StandardScaler
    from sklearn.datasets import load_breast_cancer

    from trainwire.xgboost.predictor import XGBoostPredictor

    data = load_breast_cancer(as_frame=True)
    frame = data.frame.rename(columns=lambda c: c.replace(" ", "_"))
    features = [c for c in frame.columns if c != "target"]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        scaler = StandardScaler(columns=features).fit(ray.data.from_pandas(frame[features]))
    finally:
        ray.shutdown()
    params = {"objective": "binary:logistic", "max_depth": 3, "nthread": 1}
    plain_booster = xgboost.train(params, xgboost.DMatrix(frame[features], label=frame["target"]), 10)
    scaled = scaler.transform_batch(frame[features].copy())
    scaled_booster = xgboost.train(params, xgboost.DMatrix(scaled, label=frame["target"]), 10)

    rows = frame[features].iloc[: args.rows].reset_index(drop=True)
    plain = XGBoostPredictor(plain_booster, nthread=1)
    vectorised = XGBoostPredictor(scaled_booster, preprocessor=scaler, nthread=1)
    pandas_path = XGBoostPredictor(scaled_booster, preprocessor=scaler, nthread=1)
    pandas_path._vectorised = None  # transform_batch, as before
    assert vectorised._vectorised is not None
    np.testing.assert_array_equal(vectorised.predict(rows)["predictions"], pandas_path.predict(rows)["predictions"])

    # The service hands the predictor one 1-D array per column.
    request = {c: rows[c].to_numpy() for c in features}
    table = []
    for label, batch in (("DataFrame", rows), ("dict of columns (as the service)", request)):
        times = per_call_us(
            {
                "plain": lambda b=batch: plain.predict(b),
                "slow:transform_batch": lambda b=batch: pandas_path.predict(b),
                "numpy": lambda b=batch: vectorised.predict(b),
            },
            args.calls,
            args.rounds,
        )
        table.append((label, times["plain"], times["slow:transform_batch"], times["numpy"]))

    print(f"XGBoostPredictor.predict, {args.rows} rows, in process (us per call; ratio to no preprocessor)")
    print(f"{'input':34} {'no preprocessor':>16} {'StandardScaler, transform_batch':>34} {'StandardScaler, numpy':>24}")
    for label, base, before, after in table:
        print(f"{label:34} {base:16.1f} {before:>22.1f} ({before / base:5.2f}x) {after:>14.1f} ({after / base:5.2f}x)")
    print()

    try:
        from trainwire_predictor.compiled_trees import CompiledTrees, compile_booster
    except ImportError as exc:  # noqa: F841 - the predictor package is not installed
        print("compiled forest: trainwire_predictor is not importable, skipped")
        return
    x = np.ascontiguousarray(rows.to_numpy())
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        compile_booster("xgboost", plain_booster, f"{tmp}/model.so")
        compile_s = time.perf_counter() - started
        compiled = CompiledTrees(f"{tmp}/model.so", out_dtype=np.float32)
        full = np.ascontiguousarray(frame[features].to_numpy())
        diff = float(np.max(np.abs(compiled.predict(full) - plain.framework_predict(full))))
        served = XGBoostPredictor(plain_booster, nthread=1)
        served.use_compiled(compiled)
        times = per_call_us(
            {
                "framework": lambda: plain.framework_predict(x),
                "compiled": lambda: compiled.predict(x),
                "predict framework": lambda: plain.predict_columns(request),
                "predict compiled": lambda: served.predict_columns(request),
            },
            args.calls,
            args.rounds,
        )
    framework_us, compiled_us = times["framework"], times["compiled"]
    print(f"one booster call, {args.rows} rows (us per call)")
    print(f"{'inplace_predict':>16} {'compiled (TL2cgen)':>20} {'ratio':>7} {'max abs diff':>13} {'compile s':>10}")
    print(f"{framework_us:16.1f} {compiled_us:20.1f} {framework_us / compiled_us:6.2f}x {diff:13.2g} {compile_s:10.2f}")
    print(
        f"XGBoostPredictor.predict_columns on a dict of columns (what the service calls): "
        f"{times['predict framework']:.1f} us framework, {times['predict compiled']:.1f} us compiled"
    )


if __name__ == "__main__":
    main()
