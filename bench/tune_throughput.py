"""Trials per minute of one search of tiny XGBoost trials: trainwire's Tuner against Ray Tune, side by side.

The same search, on the same machine and local Ray (``num_cpus=4``), one after the other:

1. trainwire: ``Tuner(XGBoostTrainer(...))`` against an in-process coordinator (the search runs
   in the coordinator; each trial is a run on a warm worker);
2. Ray Tune running Ray Train's ``XGBoostTrainer`` in each trial (Ray 2.x's documented way:
   a function trainable that calls ``trainer.fit()``);
3. Ray Tune running a plain function trainable that calls ``xgboost.train`` in the trial's own
   process (Ray Tune's lightest trial: no Train worker group at all).

Each search: breast cancer, ``--trials`` random samples over eta, max_depth and subsample,
``--rounds`` boosting rounds, ``max_concurrent_trials=2``, FIFO. Prints trials per minute and
the ratio of trainwire's to each peer's.

    .venv/bin/python bench/tune_throughput.py [--trials 32] [--rounds 10] [--skip-ray]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

PARAMS: dict[str, Any] = {"objective": "binary:logistic", "eval_metric": ["logloss"], "tree_method": "hist"}
LABEL = "target"


def load_data() -> tuple[Any, Any]:
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    frame = load_breast_cancer(as_frame=True).frame
    train_df, valid_df = train_test_split(frame, test_size=0.3, random_state=0)
    return train_df.reset_index(drop=True), valid_df.reset_index(drop=True)


def run_trainwire(trials: int, rounds: int, data: tuple[Any, Any]) -> tuple[float, float]:
    """Wall seconds of the search and its best valid-logloss."""
    from trainwire import RunConfig, ScalingConfig, tune
    from trainwire.tune import TuneConfig, Tuner
    from trainwire.xgboost import XGBoostTrainer

    train_df, valid_df = data
    trainer = XGBoostTrainer(
        params=PARAMS,
        label_column=LABEL,
        num_boost_round=rounds,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=1),
    )
    tuner = Tuner(
        trainer,
        param_space={
            "params": {
                "eta": tune.loguniform(1e-2, 0.5),
                "max_depth": tune.randint(2, 8),
                "subsample": tune.uniform(0.5, 1.0),
            }
        },
        tune_config=TuneConfig(metric="valid-logloss", mode="min", num_samples=trials, max_concurrent_trials=2),
        run_config=RunConfig(name=f"bench-tune-{int(time.time())}", verbose=0),
    )
    started = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - started
    assert len(grid) == trials and grid.num_errors == 0, grid.errors
    if trials > 2:
        print_phases(grid)
    return wall, grid.get_best_result().metrics["valid-logloss"]


def print_phases(grid: Any) -> None:
    """Where a trial's time goes: medians between its run's state changes, from the stored events."""
    import statistics

    from trainwire import get_client
    from trainwire_core.v1 import common_pb2

    client = get_client()
    phases: dict[str, list[float]] = {}
    for trial in grid.trials:
        times: dict[str, float] = {}
        for event in client.watch_run(trial.run_id):
            at = event.time.ToNanoseconds() / 1e9
            if event.HasField("state_change"):
                times.setdefault(common_pb2.RunState.Name(event.state_change.state), at)
            elif event.HasField("metrics"):
                times.setdefault("first report", at)
                times["last report"] = at
            elif event.HasField("checkpoint"):
                times["checkpoint"] = at
        marks = ["PENDING", "STARTING", "RUNNING", "first report", "last report", "checkpoint", "SUCCEEDED"]
        for a, b in zip(marks, marks[1:], strict=False):
            if a in times and b in times:
                phases.setdefault(f"{a} -> {b}", []).append(times[b] - times[a])
    print("trainwire trial phases (median s):", {k: round(statistics.median(v), 3) for k, v in phases.items()})


def _ray_space() -> dict[str, Any]:
    from ray import tune

    return {"eta": tune.loguniform(1e-2, 0.5), "max_depth": tune.randint(2, 8), "subsample": tune.uniform(0.5, 1.0)}


def run_ray_train_trials(trials: int, rounds: int, data: tuple[Any, Any], storage: str) -> tuple[float, float]:
    """Ray Tune with a Ray Train XGBoostTrainer inside each trial."""
    import ray
    from ray import tune

    train_df, valid_df = data
    train_ds, valid_ds = ray.data.from_pandas(train_df), ray.data.from_pandas(valid_df)

    def trial(config: dict[str, Any]) -> None:
        import xgboost
        from ray.train import RunConfig, ScalingConfig
        from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer

        def loop(loop_config: dict[str, Any]) -> None:
            import ray.train

            mats = {}
            for name in ("train", "valid"):
                df = ray.train.get_dataset_shard(name).materialize().to_pandas()
                mats[name] = xgboost.DMatrix(df.drop(columns=[LABEL]), label=df[LABEL])
            xgboost.train(
                {**PARAMS, **loop_config},
                mats["train"],
                num_boost_round=rounds,
                evals=[(mats["train"], "train"), (mats["valid"], "valid")],
                callbacks=[RayTrainReportCallback()],
            )

        result = XGBoostTrainer(
            loop,
            train_loop_config=config,
            datasets={"train": train_ds, "valid": valid_ds},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(storage_path=storage),
        ).fit()
        tune.report({"valid-logloss": result.metrics["valid-logloss"]})

    return _ray_tune(trial, trials, storage, resources={"CPU": 0.01})  # the Train group reserves its own


def run_ray_function_trials(trials: int, rounds: int, data: tuple[Any, Any], storage: str) -> tuple[float, float]:
    """Ray Tune with xgboost.train in the trial's own process."""
    train_df, valid_df = data

    def trial(config: dict[str, Any]) -> None:
        import xgboost
        from ray import tune

        mats = {
            name: xgboost.DMatrix(df.drop(columns=[LABEL]), label=df[LABEL])
            for name, df in (("train", train_df), ("valid", valid_df))
        }
        evals: dict[str, Any] = {}
        xgboost.train(
            {**PARAMS, **config},
            mats["train"],
            num_boost_round=rounds,
            evals=[(mats["valid"], "valid")],
            evals_result=evals,
        )
        tune.report({"valid-logloss": evals["valid"]["logloss"][-1]})

    return _ray_tune(trial, trials, storage, resources={"CPU": 1})


def _ray_tune(trial: Any, trials: int, storage: str, resources: dict[str, float]) -> tuple[float, float]:
    from ray import tune

    tuner = tune.Tuner(
        tune.with_resources(trial, resources),
        param_space=_ray_space(),
        tune_config=tune.TuneConfig(metric="valid-logloss", mode="min", num_samples=trials, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    )
    started = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - started
    assert len(grid) == trials and grid.num_errors == 0, grid.errors
    return wall, grid.get_best_result().metrics["valid-logloss"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--skip-ray", action="store_true", help="time trainwire only")
    args = parser.parse_args(argv)

    import ray

    import trainwire

    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    data = load_data()
    with tempfile.TemporaryDirectory() as home:
        trainwire.init(store=os.path.join(home, "store"), state=os.path.join(home, "state.db"))
        run_trainwire(2, args.rounds, data)  # warms the worker pool and imports, as a running service has
        rows = [("trainwire Tuner(XGBoostTrainer)", *run_trainwire(args.trials, args.rounds, data))]
        print("trainwire:", rows[-1], flush=True)
        trainwire.shutdown()
        if not args.skip_ray:
            storage = os.path.join(home, "ray")
            rows.append(
                ("Ray Tune + Ray Train XGBoostTrainer", *run_ray_train_trials(args.trials, args.rounds, data, storage))
            )
            rows.append(("Ray Tune + xgboost.train", *run_ray_function_trials(args.trials, args.rounds, data, storage)))
    ours = args.trials / rows[0][1] * 60
    print(
        f"\n{args.trials} trials, {args.rounds} rounds each, max_concurrent_trials=2, FIFO, "
        f"os.cpu_count()={os.cpu_count()}"
    )
    print(f"{'search':40s} {'wall s':>8s} {'trials/min':>11s} {'best valid-logloss':>19s} {'trainwire x':>12s}")
    for name, wall, best in rows:
        rate = args.trials / wall * 60
        print(f"{name:40s} {wall:8.1f} {rate:11.1f} {best:19.4f} {ours / rate:12.2f}")


if __name__ == "__main__":
    main()
