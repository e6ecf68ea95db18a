"""What must be shown on a deployment: placement across hosts, a killed coordinator, a lost worker host.

Run from a client host of the twin (``tests/e2e/test_twin_scenarios.py`` does), as root so that
it can use the twin's ``kill`` verb mid-run:

    python -m deploy.twin exec --state S client -- env GRPC_DNS_RESOLVER=native \\
        TRAINWIRE_ADDRESS=coordinator:50051 .venv/bin/python -m deploy.scenarios placement --twin-state S

Each subcommand runs one Torch fit through the SDK (``TorchTrainer(...).fit()``) whose loop
checkpoints every step and reports, per step, the world size and every rank's node IP; it
prints one JSON line with what the test asserts on:

- ``placement``: ``num_workers=2``, ``STRICT_SPREAD``;
- ``placement-xgboost``: the same for an XGBoost fit (built-in loop): each rank's pid, from its
  ``worker_<rank>.json`` in the checkpoint, is matched to the host it ran on while the fit ran;
- ``coordinator-kill``: SIGKILLs the coordinator host once two checkpoints are committed
  (its restart policy brings it back); ``coordinator-term``: the same with SIGTERM;
- ``worker-loss``: ``num_workers=(1, 2)``, ``STRICT_SPREAD``; kills every process of the host
  of rank 1 once two checkpoints are committed (the twin brings the host back later);
- ``worker-loss-restart``: the same with ``num_workers=2`` and ``FailureConfig(max_failures=1)``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trainwire
from trainwire import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, train
from trainwire.client import CoordinatorClient
from trainwire.torch import TorchTrainer
from trainwire_core.errors import ResourceExhaustedError
from trainwire_core.v1 import common_pb2

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = [
    "placement",
    "placement-xgboost",
    "coordinator-kill",
    "coordinator-term",
    "worker-loss",
    "worker-loss-restart",
]


def scenario_loop(config: dict) -> None:
    """One step a ``sleep_s``, a checkpoint every step; resumes after the step it last committed."""
    import ray
    import torch.distributed as dist

    step = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = int(Path(d, "step").read_text()) + 1
    context = train.get_context()
    node_ips: list[Any] = [None] * context.get_world_size()
    dist.all_gather_object(node_ips, ray.util.get_node_ip_address())
    while step < config["steps"]:
        time.sleep(config["sleep_s"])
        dist.barrier()
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step").write_text(str(step))
            metrics = {"step": step, "world_size": context.get_world_size(), "node_ips": ",".join(node_ips)}
            train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        step += 1


def _twin(state: str, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "deploy.twin", *args[:1], "--state", state, *args[1:]], cwd=REPO, check=True)


def _replica_at(state: str, ip: str) -> str:
    replicas = json.loads(Path(state).read_text())["replicas"]
    return next(name for name, r in replicas.items() if r["ip"] == ip)


class Fit(threading.Thread):
    """``trainer.fit()`` in a thread, so the scenario can act while the SDK watches."""

    def __init__(self, trainer: TorchTrainer) -> None:
        super().__init__(daemon=True)
        self.trainer, self.result, self.error = trainer, None, None

    def run(self) -> None:
        # Right after the twin comes up its Ray workers may not have joined yet, and a Fit the
        # cluster cannot hold is refused at once: try again while they join.
        deadline = time.monotonic() + 90
        while True:
            try:
                self.result = self.trainer.fit()
                return
            except ResourceExhaustedError as exc:
                if time.monotonic() > deadline:
                    self.error = f"{type(exc).__name__}: {exc}"
                    return
                time.sleep(1)
            except Exception as exc:  # noqa: BLE001 - reported in the JSON
                self.error = f"{type(exc).__name__}: {exc}"
                return


def _run_named(client: CoordinatorClient, name: str, timeout_s: float, fit: Fit | None = None) -> common_pb2.Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fit is not None and fit.error:
            raise RuntimeError(f"the fit failed before its run appeared: {fit.error}")
        runs = [r for r in client.list_runs().runs if r.name == name]
        if runs:
            return runs[0]
        time.sleep(0.5)
    raise TimeoutError(f"no run named {name!r} after {timeout_s:.0f} s")


def _wait_checkpoints(client: CoordinatorClient, run_id: str, count: int, timeout_s: float) -> common_pb2.Run:
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get_run(run_id)
        if len(run.best_checkpoints) >= count and run.latest_metrics.fields["world_size"].number_value >= 2:
            return run
        if run.state in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED):
            raise RuntimeError(f"run ended {common_pb2.RunState.Name(run.state)} before the kill point")
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id}: {count} checkpoints not committed after {timeout_s:.0f} s")
        time.sleep(0.2)


class HostSampler(threading.Thread):
    """Which twin host each process runs on (pid -> replica), sampled while a fit runs."""

    def __init__(self, state: str) -> None:
        super().__init__(daemon=True)
        replicas = json.loads(Path(state).read_text())["replicas"]
        self.hosts = {os.stat(f"/run/netns/{r['netns']}").st_ino: name for name, r in replicas.items()}
        self.seen: dict[int, str] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for entry in os.scandir("/proc"):
                if entry.name.isdigit() and int(entry.name) not in self.seen:
                    try:
                        host = self.hosts.get(os.stat(f"/proc/{entry.name}/ns/net").st_ino)
                    except OSError:
                        continue
                    if host is not None:
                        self.seen[int(entry.name)] = host
            self.done.wait(0.5)


def placement_xgboost(args: argparse.Namespace) -> dict[str, Any]:
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    from trainwire.xgboost import XGBoostTrainer

    df: pd.DataFrame = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    name = f"placement-xgboost-{int(time.time() * 1000)}"
    sampler = HostSampler(args.twin_state)
    sampler.start()
    started = time.monotonic()
    try:
        result = XGBoostTrainer(
            params={"objective": "binary:logistic", "eval_metric": ["logloss"]},
            label_column="target",
            num_boost_round=10,
            datasets={"train": df},
            scaling_config=ScalingConfig(num_workers=2, placement_strategy="STRICT_SPREAD"),
            run_config=RunConfig(name=name, verbose=0),
        ).fit()
    finally:
        sampler.done.set()
        sampler.join()
    report: dict[str, Any] = {"scenario": args.scenario, "name": name, "fit_s": round(time.monotonic() - started, 1)}
    report["run_id"], report["state"] = result.run_id, result.state
    with result.checkpoint.as_directory() as d:
        summaries = [json.loads(p.read_text()) for p in Path(d).glob("worker_*.json")]
    ranks = sorted(summaries, key=lambda r: r["world_rank"])
    replicas = json.loads(Path(args.twin_state).read_text())["replicas"]
    report["ranks"] = [
        {"world_rank": r["world_rank"], "pid": r["pid"], "host": sampler.seen.get(r["pid"])} for r in ranks
    ]
    report["node_ips"] = [replicas[r["host"]]["ip"] if r["host"] else None for r in report["ranks"]]
    return report


def scenario(args: argparse.Namespace) -> dict[str, Any]:
    if args.scenario == "placement-xgboost":
        return placement_xgboost(args)
    name = f"{args.scenario}-{int(time.time() * 1000)}"
    coordinator = args.scenario.startswith("coordinator-")
    strategy = "PACK" if coordinator else "STRICT_SPREAD"
    num_workers: int | tuple[int, int] = (1, 2) if args.scenario == "worker-loss" else 2
    max_failures = 1 if args.scenario == "worker-loss-restart" else 0
    steps = 3 if args.scenario == "placement" else args.steps
    trainer = TorchTrainer(
        scenario_loop,
        train_loop_config={"steps": steps, "sleep_s": args.sleep_s},
        scaling_config=ScalingConfig(num_workers=num_workers, placement_strategy=strategy),
        run_config=RunConfig(
            name=name,
            checkpoint_config=CheckpointConfig(),  # keeps every checkpoint: none may be lost
            failure_config=FailureConfig(max_failures=max_failures),
            verbose=0,
        ),
    )
    started = time.monotonic()
    fit = Fit(trainer)
    fit.start()
    client = CoordinatorClient(os.environ["TRAINWIRE_ADDRESS"])
    report: dict[str, Any] = {"scenario": args.scenario, "name": name}
    run = _run_named(client, name, 120, fit)
    report["run_id"] = run.run_id
    if args.scenario != "placement":
        before = _wait_checkpoints(client, run.run_id, 2, 180)
        report["committed_before_kill"] = sorted(c.checkpoint_id for c in before.best_checkpoints)
        report["node_ips_before_kill"] = before.latest_metrics.fields["node_ips"].string_value.split(",")
        if coordinator:
            report["killed"] = "coordinator"
        else:
            report["killed"] = _replica_at(args.twin_state, report["node_ips_before_kill"][1])
        report["killed_at_s"] = round(time.monotonic() - started, 1)
        signal = "TERM" if args.scenario == "coordinator-term" else "KILL"
        _twin(args.twin_state, "kill", "--signal", signal, report["killed"])
    fit.join(args.timeout_s)
    report["fit_s"] = round(time.monotonic() - started, 1)
    report["fit_error"] = fit.error if not fit.is_alive() else "fit() did not return"
    result = fit.result
    if result is not None:
        frame = result.metrics_dataframe
        report["result_run_id"] = result.run_id
        report["steps"] = [int(s) for s in frame["step"]]
        report["world_sizes"] = [int(s) for s in frame["world_size"]]
        report["node_ips"] = [s.split(",") for s in frame["node_ips"]]
        report["checkpoint"] = result.checkpoint.uri if result.checkpoint else None
    final = client.get_run(run.run_id)
    report["state"] = common_pb2.RunState.Name(final.state)
    report["state_reason"] = final.state_reason
    report["num_failures"] = final.num_failures
    report["num_coordinator_restarts"] = final.num_coordinator_restarts
    report["checkpoints"] = sorted(c.checkpoint_id for c in final.best_checkpoints)
    # Every event from the start, on a fresh stream: ids, report indices, state changes.
    events = list(client.watch_run(run.run_id, after_event_id=0))
    report["event_ids"] = [e.event_id for e in events]
    report["report_indices"] = [e.metrics.report_index for e in events if e.HasField("metrics")]
    report["event_steps"] = [int(e.metrics.metrics["step"]) for e in events if e.HasField("metrics")]
    report["states"] = [
        [common_pb2.RunState.Name(e.state_change.state), e.state_change.reason]
        for e in events
        if e.HasField("state_change")
    ]
    client.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--twin-state", required=True, help="the twin's state file (for its kill verb)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--sleep-s", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    trainwire.init()  # TRAINWIRE_ADDRESS
    try:
        report = scenario(args)
    finally:
        trainwire.shutdown()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
