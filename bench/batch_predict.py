"""BatchPredictor throughput: 2 scoring workers on Ray Data against in-process predict on the same rows.

Trains an XGBoost booster on breast cancer (30 features), tiles the rows (with
noise) to ``--rows`` rows, and scores them twice per trial, alternating which goes first:

- in process: ``XGBoostPredictor.predict`` on the whole DataFrame, XGBoost using
  every core (what a user scoring a frame in one process gets);
- ``BatchPredictor``: the same checkpoint and rows as a Ray Dataset (already in
  the object store), scored by a pool of 2 actors of 1 CPU each, then
  materialised. Actor start and model load are inside the timing, as a user pays them.

Target: BatchPredictor at least 0.8 of in-process rows per second.

Run: .venv/bin/python bench/batch_predict.py [--rows 1000000] [--trials 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

TARGET = 0.8
WORKERS = 2


def make_data(rows: int, trees: int):
    """The booster's checkpoint and ``rows`` rows of features (tiled breast cancer, with noise)."""
    import numpy as np
    import pandas as pd
    import xgboost
    from sklearn.datasets import load_breast_cancer

    from trainwire.xgboost import XGBoostCheckpoint

    data = load_breast_cancer()
    x, y = data.data, data.target
    params = {"objective": "binary:logistic", "max_depth": 6, "eta": 0.1}
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), trees)
    rng = np.random.default_rng(0)
    tiled = np.tile(x, (rows // len(x) + 1, 1))[:rows]
    tiled = tiled * rng.normal(1.0, 0.05, size=tiled.shape)
    frame = pd.DataFrame(tiled, columns=[f"f{i}" for i in range(x.shape[1])])
    checkpoint = XGBoostCheckpoint.from_model(booster)
    return checkpoint, frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    import numpy as np
    import ray

    from trainwire.batch_predictor import BatchPredictor
    from trainwire.xgboost import XGBoostPredictor

    checkpoint, frame = make_data(args.rows, args.trees)
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        # In the object store before either is timed: the in-process side holds its frame in memory too.
        dataset = ray.data.from_pandas(frame).repartition(WORKERS * 8).materialize()
        local = XGBoostPredictor.from_checkpoint(checkpoint)

        def in_process() -> tuple[float, np.ndarray]:
            start = time.perf_counter()
            out = local.predict(frame)["predictions"].to_numpy()
            return time.perf_counter() - start, out

        def batch() -> tuple[float, np.ndarray]:
            start = time.perf_counter()
            scored = BatchPredictor.from_checkpoint(checkpoint, XGBoostPredictor).predict(
                dataset, batch_size=args.batch_size, min_scoring_workers=WORKERS
            )
            scored = scored.materialize()
            elapsed = time.perf_counter() - start
            return elapsed, np.sort(scored.to_pandas()["predictions"].to_numpy())

        times: dict[str, list[float]] = {"in_process": [], "batch_predictor": []}
        for trial in range(args.trials):
            order = (("in_process", in_process), ("batch_predictor", batch))
            outputs = {}
            for name, fn in order if trial % 2 == 0 else order[::-1]:
                elapsed, outputs[name] = fn()
                times[name].append(elapsed)
                print(
                    f"trial {trial + 1} {name:<16} {elapsed:7.2f} s  {args.rows / elapsed:>11,.0f} rows/s", flush=True
                )
            # Same rows, same scores (Ray Data may reorder blocks, so compare sorted).
            np.testing.assert_allclose(outputs["batch_predictor"], np.sort(outputs["in_process"]), rtol=0, atol=1e-6)
    finally:
        ray.shutdown()
        shutil.rmtree(checkpoint.path, ignore_errors=True)

    local_s, batch_s = statistics.median(times["in_process"]), statistics.median(times["batch_predictor"])
    ratio = local_s / batch_s
    print(f"\nXGBoost, {args.trees} trees of depth 6, {args.rows:,} rows x 30 features, median of {args.trials} trials")
    print(f"{'in process (all cores)':<34} {args.rows / local_s:>11,.0f} rows/s")
    print(f"{'BatchPredictor, 2 workers x 1 CPU':<34} {args.rows / batch_s:>11,.0f} rows/s")
    print(f"ratio {ratio:.2f} (target >= {TARGET}): {'met' if ratio >= TARGET else 'MISSED'}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": args.rows,
                    "in_process_s": times["in_process"],
                    "batch_s": times["batch_predictor"],
                    "ratio": ratio,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
