"""Chaos: kill worker processes and the coordinator during runs; count what survives and what is lost.

Each trial is one 2-worker Torch run that checkpoints every step. Mid-run, the trial
SIGKILLs either one worker process (the run has ``FailureConfig(max_failures=1)``) or the
coordinator process, which is then started again on the same port, SQLite state and store.
A trial survives when its run SUCCEEDED with every step reported. Lost metrics are steps
missing from the run's events; lost checkpoints are checkpoints committed before the kill
that the finished run no longer has (retention keeps all of them here).

Local Ray (``num_cpus=4``), loopback only; every process it starts is stopped by its id.

    .venv/bin/python bench/chaos.py [--worker-kills 20] [--coordinator-kills 10] [--steps 6]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray

from trainwire import Checkpoint, FailureConfig, RunConfig, ScalingConfig, train
from trainwire.client import CoordinatorClient
from trainwire.torch import TorchTrainer
from trainwire_core.v1 import common_pb2


def chaos_loop(config: dict) -> None:
    import torch.distributed as dist

    step = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = int(Path(d, "step").read_text()) + 1
    context = train.get_context()
    Path(config["pids"], f"{context.get_world_rank()}-{os.getpid()}").touch()
    while step < config["steps"]:
        time.sleep(0.3)
        dist.barrier()
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step))
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
        step += 1


class Coordinator:
    """The coordinator as its own process, killed and started again by its pid."""

    def __init__(self, home: Path, ray_address: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.home, self.ray_address = home, ray_address
        self.proc: subprocess.Popen | None = None
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.home / "coordinator.log", "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainwire_coordinator", "--host", "127.0.0.1", "--port", str(self.port)]
            + ["--store", str(self.home / "store"), "--state", str(self.home / "state.db")]
            + ["--ray-address", self.ray_address],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        client = CoordinatorClient(self.address)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.list_runs(page_size=1)
                break
            except Exception:  # noqa: BLE001 - not listening yet
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the coordinator did not start; see coordinator.log") from None
                time.sleep(0.2)
        client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Tally:
    kind: str
    total: int = 0
    survived: int = 0
    lost_metrics: int = 0
    lost_checkpoints: int = 0
    recovery_s: list[float] = field(default_factory=list)


def trial(kind: str, coordinator: Coordinator, home: Path, steps: int, tally: Tally) -> None:
    pids = Path(tempfile.mkdtemp(dir=home))
    client = CoordinatorClient(coordinator.address)
    trainer = TorchTrainer(
        chaos_loop,
        train_loop_config={"pids": str(pids), "steps": steps},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(failure_config=FailureConfig(max_failures=1), verbose=0),
    )
    run = client.fit(trainer.build_request(client))
    # Kill once two checkpoints are committed.
    deadline = time.monotonic() + 120
    while len(client.get_run(run.run_id).best_checkpoints) < 2:
        if client.get_run(run.run_id).state in (common_pb2.FAILED, common_pb2.CANCELLED) or time.monotonic() > deadline:
            tally.total += 1
            print(f"  {kind:11s} kill {tally.total:2d}: the run did not reach its second checkpoint; counted as lost")
            client.close()
            return
        time.sleep(0.1)
    committed = {c.checkpoint_id for c in client.get_run(run.run_id).best_checkpoints}
    killed_at = time.time()
    if kind == "worker":
        victim = next(p for p in pids.iterdir() if p.name.startswith("1-"))
        os.kill(int(victim.name.split("-")[1]), signal.SIGKILL)
    else:
        coordinator.kill()
        coordinator.start()
        client.close()
        client = CoordinatorClient(coordinator.address)
    steps_seen: set[int] = set()
    recovered = None
    for event in client.watch_run(run.run_id, reconnect_for_s=120):
        if event.HasField("metrics"):
            steps_seen.add(int(event.metrics.metrics["step"]))
            at = event.time.ToNanoseconds() / 1e9
            if recovered is None and at > killed_at:
                recovered = at - killed_at
    final = client.get_run(run.run_id)
    client.close()
    tally.total += 1
    lost_metrics = steps - len(steps_seen & set(range(steps)))
    lost_checkpoints = len(committed - {c.checkpoint_id for c in final.best_checkpoints})
    tally.lost_metrics += lost_metrics
    tally.lost_checkpoints += lost_checkpoints
    if final.state == common_pb2.SUCCEEDED and lost_metrics == 0:
        tally.survived += 1
    if recovered is not None:
        tally.recovery_s.append(recovered)
    state = common_pb2.RunState.Name(final.state)
    print(f"  {kind:11s} kill {tally.total:2d}: {state}, lost {lost_metrics} metrics, {lost_checkpoints} checkpoints")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker-kills", type=int, default=20)
    parser.add_argument("--coordinator-kills", type=int, default=10)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    home = Path(tempfile.mkdtemp(prefix="trainwire-chaos-"))
    coordinator = Coordinator(home, ray.get_runtime_context().gcs_address)
    tallies = [Tally("worker"), Tally("coordinator")]
    try:
        coordinator.start()
        for tally, count in zip(tallies, (args.worker_kills, args.coordinator_kills)):
            for _ in range(count):
                trial(tally.kind, coordinator, home, args.steps, tally)
    finally:
        coordinator.kill()
        ray.shutdown()
    print()
    print("| kill | survived | lost metrics | lost checkpoints | first metric after the kill (mean) |")
    print("|---|---|---|---|---|")
    for t in tallies:
        mean = sum(t.recovery_s) / len(t.recovery_s) if t.recovery_s else float("nan")
        print(f"| {t.kind} | {t.survived}/{t.total} | {t.lost_metrics} | {t.lost_checkpoints} | {mean:.1f} s |")
    return 0 if all(t.survived == t.total and not t.lost_metrics and not t.lost_checkpoints for t in tallies) else 1


if __name__ == "__main__":
    raise SystemExit(main())
