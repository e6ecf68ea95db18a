"""What runtime environments and log capture cost a fit, measured against the same fit without them.

On one local Ray (``num_cpus=4``) and an in-process coordinator with warm workers:

1. the added wall time of a fit with a 5 MB ``working_dir``, the first time (packed, uploaded,
   unpacked on the host) and the second (the same content: nothing is sent or unpacked again),
   and with a ``pip`` requirement whose environment is already cached on the host;
2. the log stream's throughput per rank: lines printed by one rank, until all are readable
   through ``WatchLogs``;
3. the training loop's step rate while it prints 1,000 lines/s, as a ratio of the same loop
   printing nothing (side by side, each the median of ``--repeats`` fits).

    .venv/bin/python bench/runtime_env.py [--repeats 5]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP_S = 0.001  # one training step's compute
STEPS = 2000


def tiny_loop(config: dict) -> None:
    from trainwire import train

    train.report({"ok": 1})


def stepping_loop(config: dict) -> None:
    import time

    from trainwire import train

    started = time.perf_counter()
    for step in range(config["steps"]):
        deadline = time.perf_counter() + config["step_s"]
        while time.perf_counter() < deadline:
            pass
        if config["print"]:
            print(f"step {step} loss {1.0 / (step + 1):.6f}")
    train.report({"steps_per_s": config["steps"] / (time.perf_counter() - started)})


def printing_loop(config: dict) -> None:
    import time

    from trainwire import train

    line = "x" * 100
    started = time.perf_counter()
    for i in range(config["lines"]):
        print(f"{i} {line}")
    train.report({"print_s": time.perf_counter() - started})


def _fit(loop, config: dict | None = None, runtime_env: dict | None = None, name: str = "bench"):
    from trainwire import DataParallelTrainer, RunConfig, ScalingConfig

    started = time.perf_counter()
    result = DataParallelTrainer(
        loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name=name, verbose=0, runtime_env=runtime_env),
    ).fit()
    return time.perf_counter() - started, result


def _median_fit(repeats: int, **kwargs) -> float:
    return statistics.median(_fit(tiny_loop, **kwargs)[0] for _ in range(repeats))


def _wheel(tmp: Path) -> Path:
    src = tmp / "twbench"
    (src / "twbench").mkdir(parents=True)
    (src / "twbench" / "__init__.py").write_text("VALUE = 1\n")
    (src / "pyproject.toml").write_text(
        '[project]\nname = "twbench"\nversion = "0.1"\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    out = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
    )
    return next(out.glob("twbench-*.whl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--log-lines", type=int, default=100_000, help="lines one rank prints for the throughput")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="trainwire-bench-"))
    os.environ["TRAINWIRE_WORKER_CACHE_DIR"] = str(tmp / "worker-cache")  # a host cache of its own
    os.environ["TRAINWIRE_LOG_TO_DRIVER"] = "0"
    import ray

    import trainwire
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    thread = CoordinatorThread(
        CoordinatorSettings(
            host="127.0.0.1",
            port=0,
            store=str(tmp / "store"),
            state=str(tmp / "state.db"),
            watch_poll_s=0.05,
            worker_pool_idle_s=60,
        )
    )
    client = trainwire.init(thread.start())
    out: dict = {}
    try:
        _fit(tiny_loop)  # warms the pool
        base = _median_fit(args.repeats)
        working_dir = tmp / "project"
        working_dir.mkdir()
        (working_dir / "weights.bin").write_bytes(os.urandom(5 * 1024 * 1024))
        (working_dir / "train_lib.py").write_text("VALUE = 1\n")
        first = _fit(tiny_loop, runtime_env={"working_dir": str(working_dir)})[0]
        cached = _median_fit(args.repeats, runtime_env={"working_dir": str(working_dir)})
        pip_env = {"pip": [str(_wheel(tmp))]}
        pip_first = _fit(tiny_loop, runtime_env=pip_env)[0]
        pip_cached = _median_fit(args.repeats, runtime_env=pip_env)
        out["fit_without_runtime_env_s"] = round(base, 3)
        out["working_dir_5mb_first_added_s"] = round(first - base, 3)
        out["working_dir_5mb_cached_added_s"] = round(cached - base, 3)
        out["pip_first_install_added_s"] = round(pip_first - base, 3)
        out["pip_cached_added_s"] = round(pip_cached - base, 3)

        wall, result = _fit(printing_loop, {"lines": args.log_lines}, name="bench-log-throughput")
        run_id = result.path.rstrip("/").rsplit("/", 1)[-1]
        started = time.perf_counter()
        got = sum(1 for _ in client.watch_logs(run_id, follow=True))
        read_s = time.perf_counter() - started
        assert got == args.log_lines, f"{got} of {args.log_lines} lines came back"
        out["log_lines_per_rank"] = args.log_lines
        out["log_print_lines_per_s"] = round(args.log_lines / result.metrics["print_s"])
        out["log_fit_wall_s"] = round(wall, 2)
        out["log_read_back_lines_per_s"] = round(args.log_lines / read_s)

        rates = {True: [], False: []}
        for _ in range(args.repeats):
            for printing in (False, True):  # side by side
                config = {"steps": STEPS, "step_s": STEP_S, "print": printing}
                rates[printing].append(_fit(stepping_loop, config)[1].metrics["steps_per_s"])
        quiet, loud = statistics.median(rates[False]), statistics.median(rates[True])
        out["steps_per_s_quiet"] = round(quiet, 1)
        out["steps_per_s_printing_1000_lines_per_s"] = round(loud, 1)
        out["step_rate_ratio"] = round(loud / quiet, 3)
    finally:
        trainwire.shutdown()
        thread.stop()
        ray.shutdown()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
