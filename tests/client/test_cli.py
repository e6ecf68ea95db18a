"""The ``trainwire`` CLI against real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from trainwire import Checkpoint, RunConfig, ScalingConfig, train
from trainwire.torch import TorchTrainer

pytestmark = pytest.mark.timeout(120)


def _cli(*args: str, address: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainwire.cli"] + (["--address", address] if address else []) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def tiny_loop() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "weights.txt"), "w").write("42")
        train.report({"loss": 0.5}, checkpoint=Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def tiny_run(coordinator):
    return TorchTrainer(
        tiny_loop, scaling_config=ScalingConfig(num_workers=1), run_config=RunConfig(name="cli-run", verbose=0)
    ).fit()


def test_runs_list_show_watch(tiny_run, coordinator_address):
    listed = _cli("runs", "list", "--state", "succeeded", address=coordinator_address)
    assert listed.returncode == 0, listed.stderr
    assert tiny_run.run_id in listed.stdout and "SUCCEEDED" in listed.stdout
    shown = _cli("runs", "show", "cli-run", address=coordinator_address)
    assert json.loads(shown.stdout)["runId"] == tiny_run.run_id
    watched = _cli("runs", "watch", tiny_run.run_id, address=coordinator_address)
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert events[0]["state_change"]["state"] == "PENDING"
    assert events[-1]["state_change"]["state"] == "SUCCEEDED"
    assert any("metrics" in e and e["metrics"]["metrics"] == {"loss": 0.5} for e in events)


def test_checkpoints_download(tiny_run, coordinator_address, tmp_path):
    done = _cli("checkpoints", "download", "cli-run", str(tmp_path / "out"), address=coordinator_address)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "weights.txt").read_text() == "42"


def test_errors_are_printed_with_the_status(coordinator_address):
    done = _cli("runs", "show", "no-such-run", address=coordinator_address)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: NOT_FOUND: no run with id or name 'no-such-run'"


def test_coordinator_command_serves_on_a_free_port(ray_cluster, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainwire.cli",
            "coordinator",
            "--port",
            "0",
            "--store",
            str(tmp_path / "s"),
            "--state",
            str(tmp_path / "state.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("trainwire coordinator listening on 127.0.0.1:")
        address = line.rsplit(" ", 1)[-1].strip()
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert _cli("runs", "list", address=address).returncode == 0
    finally:
        proc.terminate()
        proc.wait(30)
