"""How long ``train.report`` keeps the loop for a 50 MB checkpoint: SYNC against ASYNC, side by side.

One real run (a trainwire worker on the local Ray, the SDK's own coordinator), one rank: the loop
writes a fresh checkpoint directory each step and times only the ``train.report`` call. SYNC
copies into the store before returning; ASYNC hard-links the files aside and returns, a worker
thread copies them and then sends the report. Every checkpoint is committed, in report order
(checked at the end).

    .venv/bin/python bench/async_checkpoint_bench.py [--size-mb 50] [--reports 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys

ASYNC_TARGET_MS = 5.0


def loop(config: dict) -> None:
    import os
    import shutil
    import tempfile
    import time

    from trainwire import train
    from trainwire.train import Checkpoint, CheckpointUploadMode

    timings: dict[str, list[float]] = {"SYNC": [], "ASYNC": []}
    step = 0
    for mode in ("SYNC", "ASYNC"):
        for _ in range(config["reports"]):
            d = tempfile.mkdtemp(prefix="bench-ckpt-")
            with open(os.path.join(d, "weights.bin"), "wb") as f:
                f.write(os.urandom(config["size_mb"] << 20))
            start = time.perf_counter()
            train.report(
                {"step": step, "mode": mode},
                checkpoint=Checkpoint.from_directory(d),
                checkpoint_upload_mode=CheckpointUploadMode(mode),
            )
            timings[mode].append((time.perf_counter() - start) * 1000)
            if mode == "SYNC":
                shutil.rmtree(d)  # ASYNC deletes its own once copied
            step += 1
    committed = train.get_all_reported_checkpoints()
    train.report({"step": step, "timings_ms": timings, "committed_steps": [c.metrics["step"] for c in committed]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=50)
    parser.add_argument("--reports", type=int, default=5, help="reports per mode")
    args = parser.parse_args(argv)

    from trainwire.data_parallel import DataParallelTrainer
    from trainwire.train import RunConfig, ScalingConfig

    result = DataParallelTrainer(
        loop,
        train_loop_config={"size_mb": args.size_mb, "reports": args.reports},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="async-checkpoint-bench", verbose=0),
    ).fit()
    timings = result.metrics["timings_ms"]
    print(f"train.report return time, {args.size_mb} MB checkpoint, {args.reports} reports each (ms)")
    print(f"{'mode':<6} {'median':>9} {'min':>9} {'max':>9}")
    for mode in ("SYNC", "ASYNC"):
        values = timings[mode]
        print(f"{mode:<6} {statistics.median(values):9.2f} {min(values):9.2f} {max(values):9.2f}")
    ratio = statistics.median(timings["SYNC"]) / max(statistics.median(timings["ASYNC"]), 1e-6)
    print(f"SYNC / ASYNC median: {ratio:.0f}x")
    expected = list(range(2 * args.reports))
    in_order = result.metrics["committed_steps"] == expected
    print(f"all {len(expected)} checkpoints committed in report order: {in_order}")
    fast = statistics.median(timings["ASYNC"]) < ASYNC_TARGET_MS
    print(f"ASYNC median under {ASYNC_TARGET_MS} ms: {fast}")
    return 0 if in_order and fast else 1


if __name__ == "__main__":
    sys.exit(main())
