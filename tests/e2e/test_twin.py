"""The compose topology as separate hosts (the twin): a fit on the cluster, served by the predictor replicas,
shown by the console.

Needs root and iproute2 (``make test`` in CI has both); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sample_project

from deploy.twin import REPO, leftovers, load_compose

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the twin makes network namespaces: needs root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="the twin needs iproute2 (`ip`)"),
]

COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_FILE = REPO / ".env.example"


def _twin(*args: str, timeout_s: float = 120, tls_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRAINWIRE_TLS_DIR": str(tls_dir)} if tls_dir is not None else None
    return subprocess.run(
        [sys.executable, "-m", "deploy.twin", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def _assert_gone(prefix: str) -> None:
    assert leftovers(prefix) == []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{prefix}-" not in names
    assert not Path(f"/tmp/{prefix}").exists()


def _in_netns(
    netns: str, argv: list[str], env: dict[str, str], timeout_s: float, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ip", "netns", "exec", netns, *argv], env=env, capture_output=True, text=True, timeout=timeout_s, cwd=cwd
    )


def _project_on_the_twin(client: str, env: dict[str, str], tmp_path: Path) -> None:
    """A multi-file project, from a directory no service of the twin starts in or has on its path."""
    # A package the workers lack travels as a py_module: a runtime_env pip line may not name a local
    # wheel (a path on the worker hosts), and the twin's hosts reach no package index.
    sample_project.build_wheel(tmp_path / "wheels")
    twtiny = tmp_path / "wheels" / "twtiny-src" / "twtiny"
    with_env = tmp_path / "project-with-env"
    runtime_env = f'{{"working_dir": ".", "py_modules": [{str(twtiny)!r}], "env_vars": {{"MODE": "fast"}}}}'
    sample_project.write(with_env, "twin-runtime-env", runtime_env)
    done = _in_netns(client, [sys.executable, "train.py"], env, 600, cwd=with_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    metrics = done.stdout.split("METRICS ", 1)[1]
    assert "'labels': 3" in metrics and "'tiny': 7" in metrics and "'mode': 'fast'" in metrics, metrics
    assert "'project_on_path': False" in metrics and "'cwd_is_project': False" in metrics, metrics
    # The workers' prints came back to the user's terminal, from the worker hosts.
    for rank in (0, 1):
        assert f"(rank={rank}, attempt=1) rank {rank} read 3 labels" in done.stdout, done.stdout[-3000:]
    # Without a runtime_env, the package beside train.py travels on its own.
    bare = tmp_path / "project-bare"
    sample_project.write(bare, "twin-no-runtime-env", "None")
    script = (bare / "train.py").read_text()
    script = script.replace("    import twtiny\n", "").replace('"tiny": twtiny.VALUE, ', "")
    script = script.replace('open("data/labels.txt")', "open(os.path.join(PROJECT, 'data', 'labels.txt'))")
    (bare / "train.py").write_text(script.replace("verbose=0", "verbose=1"))
    done = _in_netns(client, [sys.executable, "train.py"], env, 600, cwd=bare)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "shipping local module(s) mypkg" in done.stderr and "'width': 8" in done.stdout


@pytest.mark.timeout(1500)
def test_fit_on_the_twin_served_by_every_predictor_replica(tmp_path: Path, deployment_tls: Path):
    state_path = tmp_path / "state.json"
    started = time.monotonic()
    up = _twin(
        "up",
        "--detach",
        "--state",
        str(state_path),
        "--scale",
        "ray-worker=1",
        "--scale",
        "predictor=2",
        "--timeout-s",
        "600",
        timeout_s=700,
        tls_dir=deployment_tls,
    )
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    prefix = state.get("prefix", "")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        up_s = time.monotonic() - started
        replicas = state["replicas"]
        assert {"redis-1", "minio-1", "create-bucket-1", "ray-head-1", "ray-worker-1", "coordinator-1"} <= set(replicas)
        assert {"console-1"} <= set(replicas)
        assert {"predictor-1", "predictor-2"} <= set(replicas)
        assert len({r["netns"] for r in replicas.values()}) == len(replicas), "one namespace per replica"
        assert len({r["ip"] for r in replicas.values()}) == len(replicas), "one address per replica"

        services = load_compose(COMPOSE_FILE, ENV_FILE)["services"]
        aws = {k: v for k, v in services["predictor"]["environment"].items() if k.startswith("AWS_")}
        # The deployment refuses clients without its tokens.
        tokens = {
            "TRAINWIRE_TOKEN": services["coordinator"]["environment"]["TRAINWIRE_COORDINATOR_AUTH_TOKEN"],
            "TRAINWIRE_PREDICTOR_TOKEN": services["predictor"]["environment"]["TRAINWIRE_PREDICTOR_AUTH_TOKEN"],
        }
        home = tmp_path / "client-home"
        home.mkdir()
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home),
            "TRAINWIRE_ADDRESS": "coordinator:50051",  # by service name, from the client host
            "GRPC_DNS_RESOLVER": "native",  # c-ares merges hosts-file lines that share a name
            "TRAINWIRE_TLS_CA": str(deployment_tls / "ca.pem"),  # the deployment serves TLS only
            **aws,
            **tokens,
        }
        client = replicas["client"]["netns"]
        plaintext = {k: v for k, v in env.items() if k != "TRAINWIRE_TLS_CA"}
        for address in ("coordinator:50051", "predictor-1:8001", "predictor-2:8001"):
            probe = _in_netns(client, ["trainwire", "health", address], env, 30)
            assert probe.returncode == 0 and "SERVING" in probe.stdout, probe.stdout + probe.stderr
            # A client that does not speak TLS gets no answer: tokens never cross the network in clear.
            probe = _in_netns(client, ["trainwire", "health", address], plaintext, 30)
            assert probe.returncode == 2 and "UNAVAILABLE" in probe.stderr, probe.stdout + probe.stderr
        # Every Ray node keeps its own directory, as in its own container: nodes sharing one
        # raced for socket names there and crashed at start ("bind: Address already in use").
        workdir = Path(state["workdir"])
        for name in ("ray-head-1", "ray-worker-1", "coordinator-1"):
            assert list((workdir / name / "t" / "ray").glob("session_2*")), f"{name} has no Ray directory of its own"
            assert "exited with" not in (workdir / name / "log").read_text(errors="replace"), f"{name} restarted"
        # Up means the worker host's Ray node has registered (its healthcheck); a host that runs
        # no Ray node fails the same check.
        compose = load_compose(COMPOSE_FILE, ENV_FILE)["services"]["ray-worker"]["environment"]
        ray_env = {**env, **{k: v for k, v in compose.items() if k.startswith("RAY_")}}
        node_check = ["trainwire", "ray-node-health", "--address", "ray-head:6379"]
        probe = _in_netns(replicas["ray-worker-1"]["netns"], node_check, ray_env, 60)
        assert probe.returncode == 0 and "alive in the cluster" in probe.stdout, probe.stdout + probe.stderr
        probe = _in_netns(client, node_check, ray_env, 60)
        assert probe.returncode == 1 and "not registered" in probe.stderr, probe.stdout + probe.stderr

        fit_started = time.monotonic()
        smoke = _in_netns(
            client,
            [sys.executable, "deploy/smoke.py", "--predictor", "predictor-1:8001", "--predictor", "predictor-2:8001"]
            + ["--console", "http://console:8265"],
            env,
            600,
        )
        assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-5000:]
        report = json.loads(smoke.stdout.strip().splitlines()[-1])
        assert report["state"] == "SUCCEEDED"
        assert report["checkpoint"].startswith("s3://trainwire/store/runs/")
        for address, served in report["predictors"].items():
            assert served["same_as_local"], address
            assert served["rows"] == 171 and served["accuracy"] > 0.9, served
        assert set(report["predictors"]) == {"predictor-1:8001", "predictor-2:8001"}
        # An alias moved through the coordinator reaches both replicas within their index refresh (1 s).
        moved = report["alias_move"]
        assert moved["moves"] == 2 and moved["seen_by_every_replica_s"] <= 2.0, moved
        # The console, from the client host over plain HTTP: the run in its list, its page and its
        # curve, SUCCEEDED; the model as both replicas serve it (their statistics summed).
        shown = report["console"]
        assert shown["list_state"] == shown["page_state"] == shown["series_state"] == "SUCCEEDED", shown
        assert shown["valid_logloss_points"] == 20 and shown["model_inferences"] >= 2 * 171, shown

        _project_on_the_twin(client, env, tmp_path)

        # The run's checkpoints are in the bucket, its state in Redis.
        listing = _in_netns(
            client,
            [
                sys.executable,
                "-c",
                "import boto3, sys; s3 = boto3.client('s3', endpoint_url='http://minio:9000');"
                "r = s3.list_objects_v2(Bucket='trainwire', Prefix=f'store/runs/{sys.argv[1]}/');"
                "print('\\n'.join(o['Key'] for o in r.get('Contents', [])))",
                report["run_id"],
            ],
            env,
            60,
        )
        assert listing.returncode == 0, listing.stderr
        run_dir = f"store/runs/{report['run_id']}"
        assert f"{run_dir}/checkpoints.json" in listing.stdout.split(), listing.stdout
        assert f"{run_dir}/checkpoints/checkpoint_000020/worker_0.json" in listing.stdout.split(), listing.stdout
        keys = _in_netns(client, ["redis-cli", "-h", "redis", "--scan", "--pattern", f"*{report['run_id']}*"], env, 30)
        assert report["run_id"] in keys.stdout, keys.stdout + keys.stderr
        # A cut predictor host while a client round-robins over both replicas by one DNS name:
        # later calls are answered by the other replica, and no call outlives its 2 s deadline.
        ready = tmp_path / "scoring-ready"
        scoring = subprocess.Popen(
            ["ip", "netns", "exec", client, sys.executable, "deploy/round_robin.py", report["run_id"]]
            + ["--seconds", "12", "--timeout-s", "2", "--ready-file", str(ready)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert scoring.poll() is None and time.monotonic() < deadline, scoring.communicate()
            time.sleep(0.1)
        time.sleep(1)
        cut_at = time.time()
        assert _twin("link", "--state", str(state_path), "predictor-2", "down").returncode == 0
        out, err = scoring.communicate(timeout=120)
        assert scoring.returncode == 0, out[-2000:] + err[-4000:]
        scored = json.loads(out.strip().splitlines()[-1])
        calls = scored["calls"]
        assert max(c["latency_s"] for c in calls) < 2.5, "a call hung past its deadline"
        # Once a deadline has passed since the cut, every call is answered (by predictor-1).
        later = [c for c in calls if scored["started"] + c["at"] > cut_at + 2.5]
        assert later and all(c["ok"] for c in later), calls
        # Its link down, predictor-2 no longer answers; the other replica does.
        cut = _in_netns(client, ["trainwire", "health", "--timeout-s", "2", "predictor-2:8001"], env, 30)
        assert cut.returncode != 0 and "DEADLINE_EXCEEDED" in cut.stderr, cut.stdout + cut.stderr
        other = _in_netns(client, ["trainwire", "health", "predictor-1:8001"], env, 30)
        assert other.returncode == 0, other.stdout + other.stderr
        assert _twin("link", "--state", str(state_path), "predictor-2", "up").returncode == 0

        print(f"twin up {up_s:.0f} s, fit + predictions {time.monotonic() - fit_started:.0f} s: {report}")
    finally:
        if state_path.exists():
            down = _twin("down", "--state", str(state_path), timeout_s=300)
            assert down.returncode == 0, down.stdout + down.stderr
    assert prefix
    _assert_gone(prefix)
    assert not state_path.exists()


TINY_COMPOSE = """
name: tiny
services:
  redis:
    image: redis:7.4-alpine
    command: ["redis-server", "--port", "6379", "--save", "", "--protected-mode", "no"]
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      timeout: 3s
    restart: unless-stopped
  broken:
    image: trainwire:latest
    build: .
    command: ["predictor", "--no-such-flag"]
    depends_on:
      redis:
        condition: service_healthy
    healthcheck:
      test: ["CMD", "trainwire", "health", "localhost:50051"]
    restart: "no"
  needs-broken:
    image: redis:7.4-alpine
    depends_on:
      broken:
        condition: service_completed_successfully
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
    restart: "no"
"""


@pytest.fixture()
def tiny_compose(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    path = tmp_path / "docker-compose.yml"
    path.write_text(TINY_COMPOSE)
    return path


@pytest.mark.timeout(360)
def test_a_failed_start_leaves_nothing(tiny_compose: Path, tmp_path: Path):
    state_path = tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy.twin", "up", "-f", str(tiny_compose), "--env-file", "/dev/null"]
        + ["--state", str(state_path), "--timeout-s", "200"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # it tears down on Ctrl-C
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the twin did not give up on a failed service:\n{out[-3000:]}\n{err[-3000:]}")
    assert proc.returncode == 1, out + err
    assert "broken exited with 2" in err and "--no-such-flag" in err, err
    # Everything it made is gone, and the state file that named it.
    _assert_gone(f"tw{proc.pid}")
    assert not state_path.exists()


@pytest.mark.timeout(360)
def test_ctrl_c_tears_down(tiny_compose: Path, tmp_path: Path):
    tiny_compose.write_text(TINY_COMPOSE.split("  broken:")[0])
    state_path = tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy.twin", "up", "-f", str(tiny_compose), "--env-file", "/dev/null"]
        + ["--state", str(state_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    prefix = f"tw{proc.pid}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if state_path.exists() and json.loads(state_path.read_text() or "{}").get("status") == "up":
                break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.2)
        state = json.loads(state_path.read_text())
        assert state["prefix"] == prefix and state["namespaces"] and state["replicas"]["redis-1"]["pid"]
        assert leftovers(prefix), "the twin is up"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "SIGINT: tearing down" in out, out
    _assert_gone(prefix)
    assert not state_path.exists()


def test_a_missing_tls_directory_is_named_before_anything_starts(tiny_compose: Path, tmp_path: Path):
    missing = tmp_path / "no-tls-here"
    tiny_compose.write_text(
        TINY_COMPOSE.split("  broken:")[0].replace(
            "    restart: unless-stopped\n",
            f"    restart: unless-stopped\n    volumes:\n      - {missing}:/etc/trainwire/tls:ro\n",
            1,
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "deploy.twin", "up", "-f", str(tiny_compose), "--env-file", "/dev/null"]
        + ["--state", str(tmp_path / "state.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"the bind mount {missing} does not exist (make it with `trainwire tls init`)" in done.stderr, done.stderr
    assert "redis-1" not in done.stdout, "nothing may start"
