"""Seconds per epoch over a Ray Data shard: trainwire against Ray Train's own TorchTrainer, side by side.

Each row is its own program on this machine: a 2-worker TorchTrainer whose loop iterates its
``train`` shard ``--epochs`` times (``iter_torch_batches``) and reports how long the first and the
other epochs took, over a small table (``--rows`` rows).

1. trainwire, small datasets read once per attempt (the default: their blocks stay in Ray's
   object store and each rank iterates its own split locally),
2. trainwire streaming every epoch from the files (``TRAINWIRE_COORDINATOR_MATERIALIZE_DATASETS_BELOW_BYTES=0``),
3. Ray Train's ``ray.train.torch.TorchTrainer`` (its streaming split, re-executed every epoch).

    .venv/bin/python bench/dataset_epochs.py [--epochs 20] [--rows 100] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

LOOP = textwrap.dedent(
    """
    import json, sys, time

    def loop(config):
        shard = get_dataset_shard("train")
        times = []
        for _ in range(config["epochs"]):
            start = time.perf_counter()
            for _batch in shard.iter_torch_batches(batch_size=16):
                pass
            times.append(time.perf_counter() - start)
        metrics = {"first": times[0], "rest": sum(times[1:]) / max(1, len(times) - 1)}
        if get_context().get_world_rank() == 0:
            print("RESULT", json.dumps(metrics), flush=True)  # both stream a worker's output to the driver
        report(metrics)

    rows = [{"x": float(i), "y": 2.0 * i} for i in range(ROWS)]
    """
)

TRAINWIRE = (
    """
import ray, trainwire
from trainwire import ScalingConfig, train
from trainwire.torch import TorchTrainer
get_context, get_dataset_shard, report = train.get_context, train.get_dataset_shard, train.report
"""
    + LOOP
    + """
result = TorchTrainer(loop, train_loop_config={"epochs": EPOCHS}, scaling_config=ScalingConfig(num_workers=2),
                      datasets={"train": ray.data.from_items(rows)}).fit()
trainwire.shutdown()
"""
)

RAY = (
    """
import ray
from ray.train import ScalingConfig, get_context, get_dataset_shard, report
from ray.train.torch import TorchTrainer
ray.init(num_cpus=2, include_dashboard=False)
"""
    + LOOP
    + """
result = TorchTrainer(loop, train_loop_config={"epochs": EPOCHS}, scaling_config=ScalingConfig(num_workers=2),
                      datasets={"train": ray.data.from_items(rows)}).fit()
"""
)


def run(code: str, env: dict[str, str]) -> dict[str, float]:
    """Runs one program from an empty directory; returns its reported epoch times."""
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=cwd, env={**env, "HOME": cwd}, capture_output=True, text=True, timeout=600
        )
    for line in proc.stdout.splitlines():
        if "RESULT {" in line:
            return json.loads(line[line.index("RESULT {") + len("RESULT ") :])
    raise RuntimeError(f"no result (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINWIRE_", "RAY_ADDRESS"))}
    methods = {
        "trainwire (read once per attempt)": (TRAINWIRE, base),
        "trainwire (streaming every epoch)": (
            TRAINWIRE,
            {**base, "TRAINWIRE_COORDINATOR_MATERIALIZE_DATASETS_BELOW_BYTES": "0"},
        ),
        "Ray Train TorchTrainer": (RAY, base),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in methods}
    for _ in range(args.repeats):  # interleaved, so a busy moment hits every method alike
        for name, (template, env) in methods.items():
            code = template.replace("ROWS", str(args.rows)).replace("EPOCHS", str(args.epochs))
            results[name].append(run(code, env))
    ray_rest = statistics.median(r["rest"] for r in results["Ray Train TorchTrainer"])
    print(f"{args.rows} rows, 2 workers, {args.epochs} epochs, median of {args.repeats} runs")
    print(f"{'method':38} {'first epoch s':>14} {'later epochs s':>15} {'vs Ray Train':>13}")
    for name, runs in results.items():
        first = statistics.median(r["first"] for r in runs)
        rest = statistics.median(r["rest"] for r in runs)
        print(f"{name:38} {first:14.3f} {rest:15.3f} {ray_rest / rest:12.1f}x")


if __name__ == "__main__":
    main()
