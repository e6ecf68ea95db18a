"""SIGTERM ends a coordinator promptly, whatever its runs are doing (real CPUs, its own local Ray)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from trainwire_core.v1 import common_pb2


def _sleeping_loop(config):
    import time as _time

    from trainwire import train

    train.report({"step": 1})
    _time.sleep(config["sleep_s"])


@pytest.fixture
def coordinator_process(tmp_path):
    """A coordinator in its own process group with a local Ray on the machine's real CPUs."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainwire_coordinator",
            "--port",
            "0",
            "--store",
            str(tmp_path / "store"),
            "--state",
            str(tmp_path / "state.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    address = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if "listening on" in line:
            address = line.rsplit(" ", 1)[-1].strip()
            break
    assert address, f"the coordinator exited with {proc.wait()} before listening"
    try:
        yield proc, address
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its whole group: Ray's processes included
        except ProcessLookupError:
            pass
        proc.wait()


def test_sigterm_ends_the_coordinator_within_10s_while_a_fit_runs(coordinator_process):
    from trainwire import ScalingConfig
    from trainwire.client import CoordinatorClient
    from trainwire.torch import TorchTrainer

    proc, address = coordinator_process
    client = CoordinatorClient(address)
    try:
        trainer = TorchTrainer(
            _sleeping_loop,
            train_loop_config={"sleep_s": 120},
            scaling_config=ScalingConfig(num_workers=os.cpu_count()),
        )
        run = client.fit(trainer.build_request(client))
        deadline = time.monotonic() + 120
        while client.get_run(run.run_id).state != common_pb2.RUNNING:
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.2)
    finally:
        client.close()
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the coordinator ignored SIGTERM for 30 s")
    took = time.monotonic() - start
    assert took < 10, f"the coordinator took {took:.1f} s to stop after SIGTERM"


_STUCK_SERVER = """
import asyncio, sys, time
from trainwire_core.serving import serve_until_signalled

class Stuck:
    address = ""
    async def start(self):
        asyncio.get_running_loop().call_later(0.2, time.sleep, 120)  # the loop blocks, as a hung call would
        return "127.0.0.1:0"
    async def stop(self, grace_s=5.0):
        time.sleep(120)

asyncio.run(serve_until_signalled(Stuck(), "stuck"))
"""


def test_sigterm_ends_a_server_whose_event_loop_is_stuck():
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "listening on" in proc.stdout.readline()
        time.sleep(1)  # the loop is now blocked
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.monotonic() - start < 10
    finally:
        proc.kill()
        proc.wait()
