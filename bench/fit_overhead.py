"""Wall time from ``fit()`` to Result for one small XGBoost job, three ways.

1. trainwire's ``XGBoostTrainer`` against an in-process coordinator,
2. Ray Train's own ``ray.train.xgboost.XGBoostTrainer``,
3. a plain single-process ``xgboost.train``,

all on one local Ray (``num_cpus=4``), loopback only. Also times one
``train.report`` on the worker side (``WorkerSession.report`` in-process).

    .venv/bin/python bench/fit_overhead.py [--repeats 3] [--rounds 50]
        [--ray-health-check-interval 0.1] [--skip-ray]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PARAMS: dict[str, Any] = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"]}
LABEL = "target"
FIT_TARGET_S = 5.0
REPORT_TARGET_MS = 5.0


@dataclass
class Timing:
    """Wall times and validation accuracy of one method."""

    method: str
    walls: list[float] = field(default_factory=list)
    accuracy: float | None = None
    failures: int = 0

    @property
    def median(self) -> float | None:
        return statistics.median(self.walls) if self.walls else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of trainwire and single-process (median)")
    parser.add_argument("--rounds", type=int, default=50, help="boosting rounds")
    parser.add_argument(
        "--ray-health-check-interval",
        type=float,
        metavar="S",
        help="sets RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (Ray Train's default: 2.0)",
    )
    parser.add_argument("--skip-ray", action="store_true", help="leave Ray Train out")
    parser.add_argument("--report-calls", type=int, default=1000, help="train.report calls to time")
    return parser.parse_args(argv)


def load_data() -> tuple[Any, Any]:
    """Breast cancer, split 70/30 with random_state=0."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    frame = load_breast_cancer(as_frame=True).frame
    train_df, valid_df = train_test_split(frame, test_size=0.3, random_state=0)
    return train_df.reset_index(drop=True), valid_df.reset_index(drop=True)


def accuracy(booster: Any, valid_df: Any) -> float:
    """Accuracy of a binary:logistic booster on ``valid_df``."""
    import xgboost

    pred = booster.predict(xgboost.DMatrix(valid_df.drop(columns=[LABEL])))
    return float(((pred > 0.5).astype(int) == valid_df[LABEL].to_numpy()).mean())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


# --- 1. trainwire ---------------------------------------------------------
def bench_trainwire(train_df: Any, valid_df: Any, rounds: int, repeats: int) -> tuple[Timing, Timing]:
    """The first fit starts worker processes (cold); later fits reuse the warm pool."""
    from trainwire import RunConfig, ScalingConfig
    from trainwire.xgboost import XGBoostCheckpoint, XGBoostTrainer

    cold = Timing("trainwire XGBoostTrainer, cold workers")
    warm = Timing("trainwire XGBoostTrainer, warm workers")
    stamp = int(time.time())
    for i in range(repeats + 1):
        timing = cold if i == 0 else warm

        def fit(i: int = i) -> Any:
            return XGBoostTrainer(
                params=PARAMS,
                label_column=LABEL,
                num_boost_round=rounds,
                datasets={"train": train_df, "valid": valid_df},
                scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(name=f"bench-fit-{stamp}-{i}", verbose=0),
            ).fit()

        try:
            wall, result = timed(fit)
        except Exception as exc:
            timing.failures += 1
            print(f"trainwire run {i} failed:\n{traceback.format_exc()}", file=sys.stderr)
            print(f"  trainwire run {i}: FAILED ({type(exc).__name__}: {str(exc)[:300]})", flush=True)
            continue
        timing.walls.append(wall)
        if result.checkpoint is None:
            timing.failures += 1
            print(f"run {result.name} ({result.run_id}) returned no checkpoint", file=sys.stderr)
        else:
            timing.accuracy = accuracy(XGBoostCheckpoint.get_model(result.checkpoint), valid_df)
        print(f"  trainwire run {i}: {wall:.2f} s, state {result.state}, checkpoint {result.checkpoint}", flush=True)
    return cold, warm


def bench_report(address: str, secret: str, store_dir: str, calls: int) -> tuple[float, float, int]:
    """Mean and p99 ms of ``WorkerSession.report``; and how many reports the coordinator acked."""
    from trainwire.train.session import TrainContext
    from trainwire_core.storage import Store
    from trainwire_worker.report_client import ReportStreamClient
    from trainwire_worker.session import WorkerSession

    client = ReportStreamClient(address, "bench", secret)
    context = TrainContext(
        run_id="bench",
        run_name="bench",
        world_rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
    )
    session = WorkerSession(
        context=context,
        store=Store(store_dir),
        reports=client,
        checkpoint=None,
        dataset_shards={},
        next_report_index=1,
    )
    costs_ms: list[float] = []
    try:
        for i in range(calls):
            start = time.perf_counter_ns()
            session.report({"loss": 0.1, "iter": i})
            costs_ms.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        ack = client.close()
    costs_ms.sort()
    p99 = costs_ms[min(len(costs_ms) - 1, int(0.99 * len(costs_ms)))]
    return statistics.fmean(costs_ms), p99, ack.reports_received


# --- 2. Ray Train ---------------------------------------------------------
def ray_train_loop(config: dict[str, Any]) -> None:
    """The standard Ray Train (V2) XGBoost loop."""
    import ray.train
    import xgboost
    from ray.train.xgboost import RayTrainReportCallback

    label = config["label_column"]
    dmatrices = {}
    for name in ("train", "valid"):
        df = ray.train.get_dataset_shard(name).materialize().to_pandas()
        dmatrices[name] = xgboost.DMatrix(df.drop(columns=[label]), label=df[label])
    xgboost.train(
        config["params"],
        dtrain=dmatrices["train"],
        num_boost_round=config["num_boost_round"],
        evals=[(dmatrices["train"], "train"), (dmatrices["valid"], "valid")],
        verbose_eval=False,
        callbacks=[RayTrainReportCallback()],  # metrics every round, checkpoint at end
    )


def bench_ray_train(train_df: Any, valid_df: Any, rounds: int, storage: str) -> Timing:
    import ray.data
    from ray.train import RunConfig, ScalingConfig
    from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer

    interval = os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "default")
    timing = Timing(f"Ray Train XGBoostTrainer (health check {interval})")

    def fit() -> Any:
        trainer = XGBoostTrainer(
            ray_train_loop,
            train_loop_config={"params": PARAMS, "label_column": LABEL, "num_boost_round": rounds},
            datasets={"train": ray.data.from_pandas(train_df), "valid": ray.data.from_pandas(valid_df)},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name=f"bench-ray-{int(time.time())}", storage_path=storage),
        )
        return trainer.fit()

    try:
        wall, result = timed(fit)
    except Exception:
        timing.failures += 1
        print(f"Ray Train failed:\n{traceback.format_exc()}", file=sys.stderr)
        return timing
    timing.walls.append(wall)
    timing.accuracy = accuracy(RayTrainReportCallback.get_model(result.checkpoint), valid_df)
    print(f"  Ray Train: {wall:.2f} s, checkpoint {result.checkpoint}", flush=True)
    return timing


# --- 3. single process ----------------------------------------------------
def bench_single(train_df: Any, valid_df: Any, rounds: int, repeats: int) -> Timing:
    import xgboost

    timing = Timing("single-process xgboost.train")

    def fit() -> Any:
        dtrain = xgboost.DMatrix(train_df.drop(columns=[LABEL]), label=train_df[LABEL])
        dvalid = xgboost.DMatrix(valid_df.drop(columns=[LABEL]), label=valid_df[LABEL])
        return xgboost.train(
            {**PARAMS, "nthread": 2},
            dtrain,
            num_boost_round=rounds,
            evals=[(dtrain, "train"), (dvalid, "valid")],
            verbose_eval=False,
        )

    for i in range(repeats):
        wall, booster = timed(fit)
        timing.walls.append(wall)
        timing.accuracy = accuracy(booster, valid_df)
        print(f"  single-process run {i}: {wall:.3f} s", flush=True)
    return timing


# --- output ---------------------------------------------------------------
def print_table(rows: list[Timing], baseline: float | None) -> None:
    header = ("method", "wall s (median)", "ratio vs trainwire", "valid accuracy")
    cells = [header]
    for row in rows:
        med = row.median
        cells.append(
            (
                f"{row.method} [n={len(row.walls)}" + (f", {row.failures} failed]" if row.failures else "]"),
                "ERROR" if med is None else f"{med:.3f}",
                "-" if med is None or not baseline else f"{med / baseline:.2f}x",
                "-" if row.accuracy is None else f"{row.accuracy:.4f}",
            )
        )
    widths = [max(len(r[c]) for r in cells) for c in range(len(header))]
    line = "+".join("-" * (w + 2) for w in widths)
    for n, r in enumerate(cells):
        print(" | ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(r, widths))))
        if n == 0:
            print(line)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.ray_health_check_interval is not None:
        # Read by Ray Train's controller; set before ray.init / ray.train so it propagates.
        os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = str(args.ray_health_check_interval)
    import ray

    import trainwire
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    train_df, valid_df = load_data()
    print(f"data: {len(train_df)} train rows, {len(valid_df)} valid rows, {args.rounds} rounds")
    ray.init(num_cpus=4, include_dashboard=False)
    tmp = tempfile.TemporaryDirectory(prefix="trainwire-bench-")
    store_dir = os.path.join(tmp.name, "store")
    coordinator = CoordinatorThread(
        CoordinatorSettings(port=0, store=store_dir, state=os.path.join(tmp.name, "state.db"))
    )
    address = coordinator.start()
    trainwire.init(address)
    print(f"coordinator at {address}", flush=True)

    rows: list[Timing] = []
    report: tuple[float, float, int] | None = None
    try:
        tw, tw_warm = bench_trainwire(train_df, valid_df, args.rounds, args.repeats)
        rows += [tw, tw_warm]
        try:
            report = bench_report(
                address, coordinator.server.runs.report_secrets.secret_for("bench"), store_dir, args.report_calls
            )
        except Exception:
            print(f"report benchmark failed:\n{traceback.format_exc()}", file=sys.stderr)
        if not args.skip_ray:
            rows.append(bench_ray_train(train_df, valid_df, args.rounds, os.path.join(tmp.name, "ray")))
        rows.append(bench_single(train_df, valid_df, args.rounds, args.repeats))
    finally:
        trainwire.shutdown()
        try:
            coordinator.stop()
        except Exception:
            print(f"coordinator stop failed:\n{traceback.format_exc()}", file=sys.stderr)
        ray.shutdown()
        tmp.cleanup()

    print()
    print_table(rows, tw.median)
    print()
    for timing in (tw, tw_warm):
        fit_ok = timing.median is not None and timing.median < FIT_TARGET_S
        shown = "n/a" if timing.median is None else f"{timing.median:.2f} s"
        failed = f"; {timing.failures} runs failed" if timing.failures else ""
        verdict = "PASS" if fit_ok else "FAIL"
        print(f"{timing.method}: fit target < {FIT_TARGET_S:g} s: {verdict} (median {shown}{failed})")
    if report is None:
        print(f"report cost target < {REPORT_TARGET_MS:g} ms: FAIL (benchmark errored)")
    else:
        mean, p99, acked = report
        verdict = "PASS" if max(mean, p99) < REPORT_TARGET_MS else "FAIL"
        print(
            f"report cost target < {REPORT_TARGET_MS:g} ms: {verdict} (mean {mean:.3f} ms, p99 {p99:.3f} ms; "
            f"{acked}/{args.report_calls} acked by the coordinator)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
