"""A Fit that needs a Ray node still joining the cluster waits for it, then runs on it.

The coordinator runs as its own process, joined to the session's Ray cluster. The Fit asks
for a resource only the joining node offers; that node is a real ``ray start`` raylet,
started while the Fit waits and stopped by its process group afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_coordinator_restart import CoordinatorProcess, _free_port
from trainwire import RunConfig, ScalingConfig, train
from trainwire.client import CoordinatorClient
from trainwire.torch import TorchTrainer
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(240)

RESOURCE = "trainwire_test_joining_node"


def report_node() -> None:
    import ray

    train.report({"node_id": ray.get_runtime_context().get_node_id()})


def _start_node(gcs_address: str, log: Path, ray_tmp: str) -> subprocess.Popen:
    ray_cli = Path(sys.executable).parent / "ray"
    return subprocess.Popen(
        [str(ray_cli), "start", f"--address={gcs_address}", "--num-cpus=1", f"--temp-dir={ray_tmp}", "--block"]
        + ["--resources", json.dumps({RESOURCE: 1})],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the raylet leaves the cluster as it ends
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_fit_waits_for_a_joining_node_and_runs_on_it(ray_cluster, tmp_path):
    gcs_address = ray_cluster.get_runtime_context().gcs_address
    port = _free_port()
    coordinator = CoordinatorProcess(
        tmp_path, port, gcs_address, str(tmp_path / "state.db"), env={"TRAINWIRE_COORDINATOR_CAPACITY_WAIT_S": "120"}
    )
    trainer = TorchTrainer(
        report_node,
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1, RESOURCE: 1}),
        run_config=RunConfig(name=f"joining-{port}", verbose=0),
    )
    client = CoordinatorClient(f"127.0.0.1:{port}")
    node = None
    answer: dict = {}
    # A Ray directory of its own, as a host of its own has: `ray start` records there the cluster
    # it joined, where a bare ray.init() on this machine would otherwise find it. Short, as
    # Ray's socket paths must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="tw-ray-")
    try:
        coordinator.start()
        request = trainer.build_request(client)
        fit = threading.Thread(target=lambda: answer.update(run=client.fit(request)), daemon=True)
        fit.start()
        fit.join(3)
        assert fit.is_alive(), f"Fit answered before the node joined: {answer}"
        node = _start_node(gcs_address, tmp_path / "node.log", ray_tmp)
        fit.join(120)
        assert "run" in answer, "Fit did not answer once the node joined:\n" + coordinator.log()
        run_id = answer["run"].run_id
        deadline = time.monotonic() + 120
        while (run := client.get_run(run_id)).state not in (common_pb2.SUCCEEDED, common_pb2.FAILED):
            assert time.monotonic() < deadline, f"run stuck in {common_pb2.RunState.Name(run.state)}"
            time.sleep(0.5)
        assert run.state == common_pb2.SUCCEEDED, run.state_reason
        joined = [n["NodeID"] for n in ray_cluster.nodes() if n["Alive"] and RESOURCE in n["Resources"]]
        assert [run.latest_metrics.fields["node_id"].string_value] == joined
        assert "a fit waits up to 120 s for nodes to join" in coordinator.log()
        assert not Path(tempfile.gettempdir(), "ray", "ray_current_cluster").exists()
    finally:
        client.close()
        coordinator.kill_group()
        if node is not None:
            _stop_group(node)
        shutil.rmtree(ray_tmp, ignore_errors=True)
