"""Data-parallel training steps per second: trainwire's trainers against the native launchers.

One MLP training loop (``train_steps``), the same function in every mode, on 2 workers:

- torch DDP over gloo: ``TorchTrainer`` against ``torchrun --nproc_per_node 2``;
- Horovod over gloo: ``HorovodTrainer`` against ``horovodrun -np 2 --gloo``.

Each worker makes its own synthetic batches (so data loading does not count) and
uses one torch thread (both modes compete equally for the cores). Rank 0 times
``--steps`` steps after ``--warmup`` steps, between barriers, so process start,
rendezvous and fit overhead are left out. Trials alternate native and trainwire;
the table shows the median of each. Target: trainwire at least 0.98 of native.

Run: .venv/bin/python bench/ddp_throughput.py [--trials 3] [--steps 1500] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 0.98
WORKERS = 2


def train_steps(config: dict[str, Any]) -> float:
    """Trains the MLP for warm-up plus timed steps on this worker; returns timed steps per second.

    ``config["mode"]`` is "ddp" (a torch process group is already initialised) or "horovod".
    """
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    mode = config["mode"]
    model = torch.nn.Sequential(
        torch.nn.Linear(config["features"], config["hidden"]),
        torch.nn.ReLU(),
        torch.nn.Linear(config["hidden"], config["hidden"]),
        torch.nn.ReLU(),
        torch.nn.Linear(config["hidden"], 1),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if mode == "ddp":
        import torch.distributed as dist

        model = torch.nn.parallel.DistributedDataParallel(model)
        rank, barrier = dist.get_rank(), dist.barrier
    else:
        import horovod.torch as hvd

        hvd.init()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        rank = hvd.rank()

        def barrier() -> None:
            hvd.allreduce(torch.zeros(1), name="barrier")

    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(config["batch"], config["features"], generator=generator)
    y = torch.randn(config["batch"], 1, generator=generator)
    loss_fn = torch.nn.MSELoss()

    def step() -> None:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

    for _ in range(config["warmup"]):
        step()
    barrier()
    start = time.perf_counter()
    for _ in range(config["steps"]):
        step()
    barrier()
    return config["steps"] / (time.perf_counter() - start)


def trainwire_loop(config: dict[str, Any]) -> None:
    """``train_steps`` inside a trainwire worker; every rank reports (the Result keeps rank 0's)."""
    from trainwire import train

    steps_per_s = train_steps(config)
    train.report({"steps_per_s": steps_per_s})
    if config["mode"] == "horovod":
        import horovod.torch as hvd

        hvd.shutdown()


# --- native launchers ---------------------------------------------------------------
def native_worker(config: dict[str, Any], out: Path) -> None:
    """What torchrun / horovodrun start: the loop, with rank 0 writing its figure."""
    if config["mode"] == "ddp":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    else:
        rank = int(os.environ.get("HOROVOD_RANK", "0"))
    steps_per_s = train_steps(config)
    if rank == 0:
        out.write_text(json.dumps({"steps_per_s": steps_per_s}))
    if config["mode"] == "ddp":
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_native(config: dict[str, Any], workdir: Path) -> float:
    out = workdir / f"native-{config['mode']}.json"
    out.unlink(missing_ok=True)
    worker = [__file__, "--native-worker", json.dumps(config), str(out)]
    if config["mode"] == "ddp":
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={WORKERS}",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            *worker,
        ]
    else:
        horovodrun = shutil.which("horovodrun", path=os.path.dirname(sys.executable)) or "horovodrun"
        command = [horovodrun, "-np", str(WORKERS), "-H", f"localhost:{WORKERS}", "--gloo", "--network-interface", "lo"]
        command += [sys.executable, *worker]  # torchrun adds the interpreter itself
    # Its own session, so a hung launcher and all it started go together on timeout.
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, start_new_session=True)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"native {config['mode']} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())["steps_per_s"]


def run_trainwire(config: dict[str, Any]) -> float:
    from trainwire import RunConfig, ScalingConfig

    if config["mode"] == "ddp":
        from trainwire.torch import TorchTrainer as Trainer
    else:
        from trainwire.horovod import HorovodTrainer as Trainer
    result = Trainer(
        trainwire_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=WORKERS),
        run_config=RunConfig(name=f"ddp-throughput-{config['mode']}", verbose=0),
    ).fit()
    return float(result.metrics["steps_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--modes", default="ddp,horovod", help="comma-separated: ddp, horovod")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--native-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.native_worker:
        native_worker(json.loads(args.native_worker[0]), Path(args.native_worker[1]))
        return

    import ray

    import trainwire
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    modes = [m for m in args.modes.split(",") if m]
    base = {k: getattr(args, k) for k in ("steps", "warmup", "batch", "features", "hidden")}
    workdir = Path(tempfile.mkdtemp(prefix="trainwire-ddp-bench-"))
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    coordinator = CoordinatorThread(
        CoordinatorSettings(port=0, store=str(workdir / "store"), state=str(workdir / "state.db"))
    )
    trainwire.init(coordinator.start())
    figures: dict[str, dict[str, list[float]]] = {m: {"native": [], "trainwire": []} for m in modes}
    try:
        for trial in range(args.trials):
            for mode in modes:
                config = {**base, "mode": mode}
                # Alternate which goes first, so neither always runs on a warmer machine.
                order = ("native", "trainwire") if trial % 2 == 0 else ("trainwire", "native")
                for who in order:
                    value = run_native(config, workdir) if who == "native" else run_trainwire(config)
                    figures[mode][who].append(value)
                    print(f"trial {trial + 1} {mode:<8} {who:<9} {value:8.1f} steps/s", flush=True)
    finally:
        trainwire.shutdown()
        coordinator.stop()
        ray.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)

    names = {"ddp": ("torchrun --nproc_per_node 2", "TorchTrainer"), "horovod": ("horovodrun -np 2", "HorovodTrainer")}
    print(
        f"\nMLP {args.features}-{args.hidden}-{args.hidden}-1, batch {args.batch}, {WORKERS} workers, gloo, "
        f"{args.steps} timed steps, median of {args.trials} trials"
    )
    print(f"{'native':<28} {'steps/s':>8}   {'trainwire':<15} {'steps/s':>8}   {'ratio':>6}  target {TARGET}")
    summary = {}
    for mode in modes:
        native, ours = statistics.median(figures[mode]["native"]), statistics.median(figures[mode]["trainwire"])
        ratio = ours / native
        summary[mode] = {"native": native, "trainwire": ours, "ratio": ratio, "trials": figures[mode]}
        label_native, label_ours = names[mode]
        verdict = "met" if ratio >= TARGET else "MISSED"
        print(f"{label_native:<28} {native:>8.1f}   {label_ours:<15} {ours:>8.1f}   {ratio:>6.3f}  {verdict}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
