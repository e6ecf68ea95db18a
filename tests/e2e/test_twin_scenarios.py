"""What must be shown on the twin, from its client host with real CPU counts (deploy/scenarios.py).

One twin for the module (2 Ray worker hosts, a head without CPUs, no predictors): placement
across hosts (Torch and XGBoost), a SIGKILLed and a SIGTERMed coordinator, a lost worker host
(elastic, and with a restart that waits for the host to come back). Needs root and iproute2;
skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.twin import REPO, leftovers, load_compose

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the twin makes network namespaces: needs root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="the twin needs iproute2 (`ip`)"),
    # the module's twin comes up in the first test's time
    pytest.mark.timeout(900),
]

STEPS = 12
SLEEP_S = 0.7  # a step: 12 of them (plus a checkpoint each) outlast the kill point


def _twin(*args: str, timeout_s: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deploy.twin", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


class Twin:
    def __init__(self, state_path: Path, home: Path, tls_dir: Path) -> None:
        self.state_path = state_path
        self.state = json.loads(state_path.read_text())
        self.replicas = self.state["replicas"]
        services = load_compose(REPO / "docker-compose.yml", REPO / ".env.example")["services"]
        aws = {k: v for k, v in services["coordinator"]["environment"].items() if k.startswith("AWS_")}
        # The deployment refuses clients without its tokens.
        tokens = {
            "TRAINWIRE_TOKEN": services["coordinator"]["environment"]["TRAINWIRE_COORDINATOR_AUTH_TOKEN"],
            "TRAINWIRE_PREDICTOR_TOKEN": services["predictor"]["environment"]["TRAINWIRE_PREDICTOR_AUTH_TOKEN"],
        }
        self.env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home),
            "TRAINWIRE_ADDRESS": "coordinator:50051",  # by service name, from the client host
            "GRPC_DNS_RESOLVER": "native",  # c-ares merges hosts-file lines that share a name
            "TRAINWIRE_TLS_CA": str(tls_dir / "ca.pem"),  # the deployment serves TLS only
            **aws,
            **tokens,
        }

    def ip(self, replica: str) -> str:
        return self.replicas[replica]["ip"]

    def scenario(self, name: str) -> dict[str, Any]:
        """Runs ``deploy/scenarios.py NAME`` on the client host; its JSON report."""
        started = time.monotonic()
        done = _twin(
            "exec",
            "--state",
            str(self.state_path),
            "client",
            "--",
            sys.executable,
            "-m",
            "deploy.scenarios",
            name,
            "--twin-state",
            str(self.state_path),
            "--steps",
            str(STEPS),
            "--sleep-s",
            str(SLEEP_S),
            timeout_s=420,
            env=self.env,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name}: {time.monotonic() - started:.0f} s: {report}")
        return report


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory, deployment_tls: Path) -> Iterator[Twin]:
    tmp = tmp_path_factory.mktemp("twin-scenarios")
    state_path = tmp / "state.json"
    up = _twin(
        "up",
        "--detach",
        "--state",
        str(state_path),
        "--scale",
        "ray-worker=2",
        "--scale",
        "predictor=0",
        "--timeout-s",
        "600",
        timeout_s=700,
        env={**os.environ, "TRAINWIRE_TLS_DIR": str(deployment_tls)},
    )
    prefix = json.loads(state_path.read_text()).get("prefix", "") if state_path.exists() else ""
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        home = tmp / "client-home"
        home.mkdir()
        yield Twin(state_path, home, deployment_tls)
    finally:
        if state_path.exists():
            down = _twin("down", "--state", str(state_path), timeout_s=300)
            assert down.returncode == 0, down.stdout + down.stderr
    assert prefix and leftovers(prefix) == []


def _assert_nothing_lost(report: dict[str, Any]) -> None:
    """Succeeded, every step in metrics_dataframe and in the events, every checkpoint kept.

    A step reported but not yet checkpointed when a group ends runs again after the restart
    (as in Ray Train), so it may appear twice; none may be missing, and they come in order.
    """
    assert report["fit_error"] is None, report["fit_error"]
    assert report["state"] == "SUCCEEDED" and report["result_run_id"] == report["run_id"]
    assert sorted(set(report["steps"])) == list(range(STEPS)), "metrics_dataframe has every step"
    assert report["steps"] == sorted(report["steps"]), "steps come in order"
    assert sorted(set(report["event_steps"])) == list(range(STEPS))
    indices = report["report_indices"]
    assert indices == sorted(set(indices)), "report indices only grow, none repeats"
    # Watched from 0: ids 1..N, no gap, no repeat.
    assert report["event_ids"] == list(range(1, len(report["event_ids"]) + 1))
    assert set(report["committed_before_kill"]) <= set(report["checkpoints"]), "no committed checkpoint lost"
    assert len(report["checkpoints"]) >= STEPS


def test_strict_spread_puts_one_rank_on_each_ray_worker_host(twin: Twin):
    report = twin.scenario("placement")
    assert report["state"] == "SUCCEEDED", report
    workers = {twin.ip("ray-worker-1"), twin.ip("ray-worker-2")}
    for ranks in report["node_ips"]:
        assert len(ranks) == 2 and set(ranks) == workers, ranks
    assert twin.ip("ray-head-1") not in report["node_ips"][0], "the head offers no CPUs"


def test_strict_spread_puts_one_xgboost_rank_on_each_ray_worker_host(twin: Twin):
    report = twin.scenario("placement-xgboost")
    assert report["state"] == "SUCCEEDED", report
    assert [r["world_rank"] for r in report["ranks"]] == [0, 1], report["ranks"]
    assert set(report["node_ips"]) == {twin.ip("ray-worker-1"), twin.ip("ray-worker-2")}, report["ranks"]


@pytest.mark.parametrize("scenario", ["coordinator-kill", "coordinator-term"])
def test_a_killed_coordinator_loses_nothing(twin: Twin, scenario: str):
    report = twin.scenario(scenario)
    _assert_nothing_lost(report)
    assert report["num_coordinator_restarts"] == 1 and report["num_failures"] == 0
    restarting = [reason for state, reason in report["states"] if state == "RESTARTING"]
    assert any(r.startswith("the coordinator restarted; resuming from checkpoint") for r in restarting), restarting
    if scenario == "coordinator-term":
        assert "the coordinator is stopping; the next coordinator carries the run on" in restarting


def test_an_elastic_run_carries_on_when_a_worker_host_is_lost(twin: Twin):
    report = twin.scenario("worker-loss")
    assert report["killed"].startswith("ray-worker-")
    _assert_nothing_lost(report)
    assert report["num_failures"] == 0
    kill_step = len(report["committed_before_kill"])
    assert 1 in report["world_sizes"][kill_step:], "it carried on with one worker"


def test_a_run_waits_for_a_lost_worker_host_and_resumes(twin: Twin):
    report = twin.scenario("worker-loss-restart")
    assert report["killed"].startswith("ray-worker-")
    _assert_nothing_lost(report)
    assert report["num_failures"] == 1
    restarting = [reason for state, reason in report["states"] if state == "RESTARTING"]
    assert any(r.startswith("restart 1 after failure") for r in restarting), restarting
    assert any(r.startswith("waiting for resources: 2 workers") for r in restarting), restarting
    assert all(ws == 2 for ws in report["world_sizes"])
