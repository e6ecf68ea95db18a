"""BatchPredictor throughput: 2 scoring workers on Ray Data against in-process predict on the same rows.

Trains an XGBoost booster on breast cancer (30 features), tiles the rows (with
noise) to ``--rows`` rows, and scores them twice per trial, alternating which goes first:

- in process: ``XGBoostPredictor.predict`` on the whole DataFrame, XGBoost using
  every core (what a user scoring a frame in one process gets);
- ``BatchPredictor``: the same checkpoint and rows as a Ray Dataset (already in
  the object store), scored by a pool of 2 actors of 1 CPU each, then
  materialised. Actor start and model load are inside the timing, as a user pays them.

Target (issue 8): BatchPredictor at least 0.8 of in-process rows per second.

Every BatchPredictor trial is also split, from Ray Data's own per-task stats, into the
wait before the first scoring task starts (actor processes, imports, checkpoint load,
scheduling), the span in which the tasks score, and what the tasks spend on
building pandas batches, in ``_ScoringActor`` (predict) and on building output blocks.
The scoring span alone gives the pool's steady rows/s. Last, 2 bare actors doing what a
scoring worker does at start split that first wait into process start, imports and model load.

The script starts its own local Ray (``address="local"``, ``--num-cpus`` CPUs, default 2)
and shuts it down at the end.

Run: .venv/bin/python bench/batch_predict.py [--rows 1000000] [--trials 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

TARGET = 0.8
WORKERS = 2
SCORING_OP = "_ScoringActor"


def make_data(rows: int, trees: int) -> tuple[Any, Any]:
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


def breakdown(scored: Any, started: float, finished: float) -> dict[str, float]:
    """Where one BatchPredictor run's wall time went, from Ray Data's per-task stats (seconds).

    Task start and end times are ``time.perf_counter()`` in the workers: the system's monotonic
    clock, the same in every process of this machine, so they line up with the driver's.
    """
    summary = scored.get_stats_summary()
    ops = [op for op in summary.operators_stats if SCORING_OP in op.operator_name]
    if not ops or ops[0].earliest_start_time is None:
        return {}
    op = ops[0]

    def total(stat: Any) -> float:
        return float(stat.sum) if stat is not None else float("nan")

    return {
        "wall_s": finished - started,
        "before_first_task_s": op.earliest_start_time - started,
        "scoring_span_s": op.latest_end_time - op.earliest_start_time,
        "after_last_task_s": finished - op.latest_end_time,
        "tasks": op.wall_time.count if op.wall_time is not None else 0,
        "task_wall_sum_s": total(op.wall_time),
        "input_prep_sum_s": total(op.input_prep_time),
        "udf_sum_s": total(op.function_body_time),
        "output_build_sum_s": total(op.output_build_time),
    }


def start_probe(checkpoint: Any, workers: int = WORKERS) -> dict[str, float]:
    """What starting one scoring worker costs, measured in ``workers`` fresh actors started together.

    Splits the wait before a pool's first task into: the actor's process being up (driver's
    request to the actor's constructor), the imports a scoring worker needs (Ray Data's
    worker side, pandas, trainwire, XGBoost) and ``XGBoostPredictor.from_checkpoint``.
    Medians over the actors, in seconds.
    """
    import ray

    class Probe:
        def __init__(self) -> None:
            self.born = time.perf_counter()

        def start(self) -> tuple[float, float, float]:
            began = time.perf_counter()
            import ray.data._internal.execution.operators.actor_pool_map_operator  # noqa: F401
            import ray.data.preprocessors  # noqa: F401
            import xgboost  # noqa: F401 - trainwire imports it on the first load

            from trainwire.batch_predictor import BatchPredictor  # noqa: F401
            from trainwire.xgboost import XGBoostPredictor

            imported = time.perf_counter()
            XGBoostPredictor.from_checkpoint(checkpoint)
            return self.born, imported - began, time.perf_counter() - imported

    actor_cls = ray.remote(num_cpus=1)(Probe)
    requested = time.perf_counter()
    actors = [actor_cls.remote() for _ in range(workers)]
    results = ray.get([a.start.remote() for a in actors])
    ready = time.perf_counter()
    for actor in actors:
        ray.kill(actor)
    return {
        "process_up_s": statistics.median(born - requested for born, _, _ in results),
        "imports_s": statistics.median(r[1] for r in results),
        "model_load_s": statistics.median(r[2] for r in results),
        "all_ready_s": ready - requested,
    }


def main() -> None:
    """Runs the interleaved trials and prints rows/s, the ratio and the profile."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--num-cpus", type=int, default=WORKERS, help="CPUs of the local Ray the script starts")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    import numpy as np
    import ray

    from trainwire.batch_predictor import BatchPredictor
    from trainwire.xgboost import XGBoostPredictor

    checkpoint, frame = make_data(args.rows, args.trees)
    # "local": a Ray of our own, never one another program on this machine started.
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    profiles: list[dict[str, float]] = []
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
            finished = time.perf_counter()
            profiles.append(breakdown(scored, start, finished))
            return finished - start, np.sort(scored.to_pandas()["predictions"].to_numpy())

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
        startup = start_probe(checkpoint)
    finally:
        ray.shutdown()
        shutil.rmtree(checkpoint.path, ignore_errors=True)

    local_s, batch_s = statistics.median(times["in_process"]), statistics.median(times["batch_predictor"])
    ratio = local_s / batch_s
    print(f"\nXGBoost, {args.trees} trees of depth 6, {args.rows:,} rows x 30 features, median of {args.trials} trials")
    print(f"{'in process (all cores)':<44} {args.rows / local_s:>11,.0f} rows/s")
    print(f"{'BatchPredictor, 2 workers x 1 CPU, end to end':<44} {args.rows / batch_s:>11,.0f} rows/s")
    print(f"ratio {ratio:.2f} (target >= {TARGET}): {'met' if ratio >= TARGET else 'MISSED'}")

    profile: dict[str, float] = {}
    if profiles and all(profiles):
        profile = {key: statistics.median(p[key] for p in profiles) for key in profiles[0]}
        steady = args.rows / profile["scoring_span_s"]
        print(f"\nwhere a BatchPredictor run's {profile['wall_s']:.2f} s go (median of trials, Ray Data task stats)")
        print(f"  {'before the first task (actors, imports, model load)':<56} {profile['before_first_task_s']:6.2f} s")
        print(f"  {'scoring span (first task start to last task end)':<56} {profile['scoring_span_s']:6.2f} s")
        print(f"  {'after the last task (materialize)':<56} {profile['after_last_task_s']:6.2f} s")
        print(f"  in the {profile['tasks']:.0f} tasks, summed over both workers ({profile['task_wall_sum_s']:.2f} s):")
        print(f"    {'blocks -> pandas batches':<54} {profile['input_prep_sum_s']:6.2f} s")
        print(f"    {'_ScoringActor (XGBoostPredictor.predict)':<54} {profile['udf_sum_s']:6.2f} s")
        print(f"    {'output blocks':<54} {profile['output_build_sum_s']:6.2f} s")
        print(
            f"  steady rows/s of the pool (scoring span only): {steady:,.0f}, "
            f"{steady / (args.rows / local_s):.2f}x in process"
        )
        print(f"starting {WORKERS} bare actors that do what a scoring worker does (median per actor)")
        print(f"  {'process up (request to constructor)':<56} {startup['process_up_s']:6.2f} s")
        print(f"  {'imports (Ray Data worker side, trainwire, XGBoost)':<56} {startup['imports_s']:6.2f} s")
        print(f"  {'XGBoostPredictor.from_checkpoint':<56} {startup['model_load_s']:6.2f} s")
        print(f"  {'both ready':<56} {startup['all_ready_s']:6.2f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": args.rows,
                    "trees": args.trees,
                    "in_process_s": times["in_process"],
                    "batch_s": times["batch_predictor"],
                    "in_process_rows_per_s": args.rows / local_s,
                    "batch_rows_per_s": args.rows / batch_s,
                    "ratio": ratio,
                    "target_met": ratio >= TARGET,
                    "profile": profile,
                    "startup": startup,
                    "profiles": profiles,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
