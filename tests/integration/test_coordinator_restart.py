"""Runs outlive their coordinator: a killed coordinator's successor carries active runs on.

The coordinator runs as its own process, joined to the session's Ray cluster, and is
really killed (SIGKILL) or stopped (SIGTERM) in the middle of a 2-worker Torch run while
a user's script is inside ``TorchTrainer.fit()``. A new coordinator process on the same
port, metadata store (SQLite or Redis) and shared store takes the run up from its latest
committed checkpoint. On the embedded default, ``trainwire.init()`` restarts the coordinator.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trainwire.client import CoordinatorClient, format_log_line
from trainwire_core.v1 import common_pb2, coordinator_pb2

pytestmark = pytest.mark.timeout(300)

STEPS = 8

USER_SCRIPT = textwrap.dedent(
    f"""
    import json, os, sys, tempfile, time

    import trainwire
    from trainwire import Checkpoint, RunConfig, ScalingConfig, train
    from trainwire.torch import TorchTrainer

    def loop():
        import torch.distributed as dist
        step = 0
        checkpoint = train.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                step = int(open(os.path.join(d, "step")).read()) + 1
        while step < {STEPS}:
            time.sleep(1.0)
            dist.barrier()  # the two workers really train together
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "step"), "w").write(str(step))
                train.report({{"step": step}}, checkpoint=Checkpoint.from_directory(d))
            print(f"step {{step}} reported", flush=True)
            step += 1

    if sys.argv[1] == "embedded":
        # The embedded default: this program starts (and supervises) its own coordinator.
        from trainwire import session_client

        trainwire.init(store=sys.argv[3], state=sys.argv[4])
        info = f"{{session_client._embedded.pid}} {{trainwire.get_client().address}}"
        open(sys.argv[5] + ".tmp", "w").write(info)
        os.rename(sys.argv[5] + ".tmp", sys.argv[5])
    else:
        trainwire.init(sys.argv[1])
    result = TorchTrainer(
        loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(name=sys.argv[2], verbose=0)
    ).fit()
    steps = [m["step"] for m in result.metrics_dataframe.to_dict("records")]
    print("RESULT " + json.dumps({{"run_id": result.run_id, "metrics": result.metrics, "steps": steps}}), flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CoordinatorProcess:
    """``python -m trainwire_coordinator`` in its own process group, stopped by its id."""

    def __init__(self, home: Path, port: int, ray_address: str, state: str, env: dict[str, str] | None = None) -> None:
        self.home, self.port, self.ray_address, self.state = home, port, ray_address, state
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.home / f"coordinator-{self.starts}.log", "wb")  # noqa: SIM115 - the child owns it
        env = {**os.environ, "TRAINWIRE_COORDINATOR_WATCH_POLL_S": "0.2", **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainwire_coordinator", "--host", "127.0.0.1", "--port", str(self.port)]
            + ["--store", str(self.home / "store"), "--state", self.state]
            + ["--ray-address", self.ray_address],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        client = CoordinatorClient(f"127.0.0.1:{self.port}")
        deadline = time.monotonic() + 60
        try:
            while True:
                assert self.proc.poll() is None, self.log()
                try:
                    client.list_runs(page_size=1)
                    return
                except Exception:  # noqa: BLE001 - not listening yet
                    assert time.monotonic() < deadline, "coordinator did not start:\n" + self.log()
                    time.sleep(0.2)
        finally:
            client.close()

    def stop(self, sig: int) -> float:
        """Sends ``sig`` to the coordinator; returns the seconds it took to exit."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=20)
        return time.monotonic() - started

    def kill_group(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.home.glob("coordinator-*.log")))


def _wait_for_checkpoints(client: CoordinatorClient, name: str, count: int, log: Callable[[], str]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            run = client.get_run(name)
            if len(run.best_checkpoints) >= count:
                return run.run_id
        except Exception:  # noqa: BLE001 - the run is not recorded yet
            pass
        time.sleep(0.2)
    raise AssertionError(f"no {count} checkpoints within 120 s:\n{log()}")


def _watch_until_committed(client: CoordinatorClient, run_id: str) -> tuple[coordinator_pb2.Run, list]:
    """The run now, and a watcher's view up to its committed checkpoints (the kill then cuts the stream)."""
    before = client.get_run(run_id)
    waiting = {c.checkpoint_id for c in before.best_checkpoints}
    seen = []
    for event in client.watch_run(run_id):
        seen.append(event)
        if event.HasField("checkpoint"):
            waiting.discard(event.checkpoint.checkpoint_id)
            if not waiting:
                break
    return before, seen


def _user_result(user: subprocess.Popen, log: Callable[[], str]) -> dict:
    out, _ = user.communicate(timeout=240)
    text = out.decode(errors="replace")
    assert user.returncode == 0, text[-4000:] + log()
    result = json.loads(text.split("RESULT ", 1)[1].splitlines()[0])
    result["shown"] = [line for line in text.splitlines() if line.startswith("(rank=")]
    return result


def _assert_carried_on(client: CoordinatorClient, run_id: str, before, seen: list, result: dict) -> None:
    run = client.get_run(run_id)
    assert run.state == common_pb2.SUCCEEDED
    assert run.num_failures == 0, "a coordinator restart is not a failure"
    assert run.num_coordinator_restarts == 1
    # Every step was reported; a step reported but not yet checkpointed at the kill runs again.
    assert sorted(set(result["steps"])) == list(range(STEPS)), result["steps"]
    assert result["metrics"] == {"step": STEPS - 1}
    # No committed checkpoint was lost (the run keeps all of them).
    kept = {c.checkpoint_id for c in run.best_checkpoints}
    assert {c.checkpoint_id for c in before.best_checkpoints} <= kept
    assert len(kept) >= STEPS
    # WatchRun from the last event seen yields every later event exactly once.
    rest = list(client.watch_run(run_id, after_event_id=seen[-1].event_id))
    everything = list(client.watch_run(run_id))
    assert [e.event_id for e in seen + rest] == [e.event_id for e in everything]
    assert len({e.event_id for e in everything}) == len(everything)
    # The workers' lines that fit() printed live, through the restart: each line of the
    # store's logs once, none lost or repeated.
    stored = [format_log_line(line) for line in client.watch_logs(run_id, follow=False)]
    assert sorted(result["shown"]) == sorted(stored), (result["shown"], stored)
    assert len(set(stored)) == len(stored) and any("step 0 reported" in s for s in stored)
    reasons = [e.state_change.reason for e in everything if e.HasField("state_change")]
    assert any(r.startswith("the coordinator restarted; resuming from checkpoint") for r in reasons), reasons


def _user(tmp_path: Path, *args: str) -> subprocess.Popen:
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    return subprocess.Popen(
        [sys.executable, str(tmp_path / "user.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _end(user: subprocess.Popen | None) -> None:
    if user is not None and user.poll() is None:
        os.killpg(user.pid, signal.SIGKILL)
        user.wait()


@pytest.mark.parametrize(
    ("sig", "metadata"),
    [(signal.SIGKILL, "sqlite"), (signal.SIGTERM, "redis")],
    ids=["sigkill-sqlite", "sigterm-redis"],
)
def test_active_run_survives_coordinator_restart(ray_cluster, request, tmp_path, sig, metadata):
    port = _free_port()
    state = request.getfixturevalue("redis_url") if metadata == "redis" else str(tmp_path / "state.db")
    coordinator = CoordinatorProcess(tmp_path, port, ray_cluster.get_runtime_context().gcs_address, state)
    address = f"127.0.0.1:{port}"
    name = f"survivor-{sig.name.lower()}-{metadata}-{port}"
    user = None
    client = CoordinatorClient(address)
    try:
        coordinator.start()
        user = _user(tmp_path, address, name)
        run_id = _wait_for_checkpoints(client, name, 2, coordinator.log)
        before, seen = _watch_until_committed(client, run_id)
        stop_s = coordinator.stop(sig)
        assert stop_s < 10, f"the coordinator took {stop_s:.1f} s to stop"
        coordinator.start()
        result = _user_result(user, coordinator.log)
        _assert_carried_on(client, run_id, before, seen, result)
    finally:
        client.close()
        _end(user)
        coordinator.kill_group()


def test_embedded_coordinator_is_restarted_and_the_run_carries_on(ray_cluster, tmp_path):
    """The embedded default (SQLite, local Ray): ``trainwire.init()`` restarts its coordinator."""
    info = tmp_path / "embedded"
    name = "survivor-embedded"
    user = _user(tmp_path, "embedded", name, str(tmp_path / "store"), str(tmp_path / "state.db"), str(info))
    inspector = CoordinatorProcess(
        tmp_path, _free_port(), ray_cluster.get_runtime_context().gcs_address, str(tmp_path / "state.db")
    )
    client = None
    try:
        deadline = time.monotonic() + 120
        while not info.exists():
            assert user.poll() is None and time.monotonic() < deadline, user.communicate()[0].decode()[-4000:]
            time.sleep(0.2)
        pid, address = info.read_text().split()
        client = CoordinatorClient(address)
        run_id = _wait_for_checkpoints(client, name, 2, lambda: "")
        before, seen = _watch_until_committed(client, run_id)
        os.kill(int(pid), signal.SIGKILL)
        result = _user_result(user, lambda: "")
        # With its program gone, the embedded coordinator stops too (its stdin closed).
        deadline = time.monotonic() + 20
        while _serving(address):
            assert time.monotonic() < deadline, "the embedded coordinator outlived its program"
            time.sleep(0.5)
        client.close()
        # What it left in its store and state, read by a coordinator of the test's own.
        inspector.start()
        client = CoordinatorClient(f"127.0.0.1:{inspector.port}")
        _assert_carried_on(client, run_id, before, seen, result)
    finally:
        if client is not None:
            client.close()
        _end(user)
        inspector.kill_group()


def _serving(address: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
            return True
        except grpc.RpcError:
            return False
