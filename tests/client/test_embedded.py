"""``trainwire.init()`` with no address starts an embedded coordinator process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from trainwire_core.v1 import common_pb2

pytestmark = [pytest.mark.timeout(180), pytest.mark.integration]  # it starts embedded Ray clusters

SCRIPT = textwrap.dedent(
    """
    import trainwire
    from sklearn.datasets import load_iris
    from sklearn.tree import DecisionTreeClassifier
    from trainwire import RunConfig
    from trainwire.sklearn import SklearnTrainer

    client = trainwire.init()
    df = load_iris(as_frame=True).frame
    result = SklearnTrainer(
        estimator=DecisionTreeClassifier(random_state=0), label_column="target",
        datasets={"train": df}, run_config=RunConfig(name="embedded", verbose=0),
    ).fit()
    print("ADDRESS", client.address)
    print("CHECKPOINT", result.checkpoint.uri)
    trainwire.shutdown()
    """
)


def test_init_without_an_address_starts_and_stops_a_local_coordinator(ray_cluster, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRAINWIRE_ADDRESS"}
    env["TRAINWIRE_COORDINATOR_STORE"] = str(tmp_path / "store")
    env["TRAINWIRE_COORDINATOR_STATE"] = str(tmp_path / "state.db")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["ADDRESS"].startswith("127.0.0.1:")
    assert lines["CHECKPOINT"].startswith(f"file://{tmp_path}/store/runs/")
    assert (tmp_path / "state.db").exists()


PROGRAM = textwrap.dedent(
    """
    import sys, threading, time
    import trainwire
    from trainwire import ScalingConfig, RunConfig
    from trainwire.torch import TorchTrainer
    from trainwire_core.v1 import common_pb2

    def loop():
        import time
        from trainwire import train
        for step in range(600):
            train.report({"step": step})
            time.sleep(0.5)

    client = trainwire.init()
    threading.Thread(
        target=lambda: TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                                    run_config=RunConfig(name="killed", verbose=0)).fit(),
        daemon=True,
    ).start()
    while True:
        runs = client.list_runs([common_pb2.RUNNING]).runs
        if runs:
            print("RUN", runs[0].run_id, flush=True)
            break
        time.sleep(0.5)
    time.sleep(600)
    """
)

NEXT_PROGRAM = textwrap.dedent(
    """
    import sys
    import trainwire
    from sklearn.datasets import load_iris
    from sklearn.tree import DecisionTreeClassifier
    from trainwire import RunConfig
    from trainwire.sklearn import SklearnTrainer

    client = trainwire.init()
    import os, ray, ray.data
    assert ray.data.range(8).count() == 8  # the program's own Ray Data work
    print("RAY", ray.get_runtime_context().gcs_address == os.environ.get("RAY_ADDRESS"), flush=True)
    old = client.get_run(sys.argv[1])
    print("OLD", old.state, old.state_reason, flush=True)
    df = load_iris(as_frame=True).frame
    result = SklearnTrainer(
        estimator=DecisionTreeClassifier(random_state=0), label_column="target",
        datasets={"train": df}, run_config=RunConfig(name="next", verbose=0),
    ).fit()
    print("NEXT", result.checkpoint is not None, flush=True)
    trainwire.shutdown()
    """
)


def _descendants(pid: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(pid).children(recursive=True)]


def _alive(pids: list[int]) -> list[int]:
    import psutil

    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.timeout(300)
def test_a_killed_program_takes_its_embedded_cluster_and_runs_with_it(tmp_path):
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("TRAINWIRE_ADDRESS", "RAY_ADDRESS")}
    env["TRAINWIRE_COORDINATOR_STORE"] = str(tmp_path / "store")
    env["TRAINWIRE_COORDINATOR_STATE"] = str(tmp_path / "state.db")
    env["TRAINWIRE_COORDINATOR_RAY_NUM_CPUS"] = "2"
    program = subprocess.Popen(
        [sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        assert program.stdout is not None
        line = program.stdout.readline()
        assert line.startswith("RUN "), line
        run_id = line.split()[1]
        family = _descendants(program.pid)
        assert len(family) >= 3  # the coordinator, its Ray and the two train workers at least
        program.send_signal(signal.SIGKILL)  # as the OOM killer or `kill -9` would
        program.wait(10)
        deadline = time.monotonic() + 15
        while _alive(family) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _alive(family), f"left running 15 s after the program died: {_alive(family)}"
    finally:
        if program.poll() is None:
            os.killpg(program.pid, signal.SIGKILL)

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", NEXT_PROGRAM, run_id], capture_output=True, text=True, env=env, timeout=150
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    cancelled = str(common_pb2.CANCELLED)
    assert lines["OLD"] == f"{cancelled} the program that started it exited"
    assert lines["NEXT"] == "True"
    assert lines["RAY"] == "True"  # it joined the embedded coordinator's Ray: one Ray on these cores
    print(f"the next program's fit took {time.monotonic() - started:.1f} s")


# The program's own Ray after init(): with ray.init's keywords (its driver connects at once), and
# with none after an early `import ray` (it joins on first use, with the config Ray read on import).
RAY_PROGRAMS = {
    "keywords": (
        "import trainwire\ntrainwire.init(num_cpus=4, configure_logging=False, include_dashboard=False)\nimport ray\n"
    ),
    "first_use": "import ray, trainwire\ntrainwire.init(num_cpus=4)\n",
}
RAY_WORK = textwrap.dedent(
    """
    import time

    print("COUNT", ray.data.range(10).count(), flush=True)

    @ray.remote
    def plus_one(x):
        return x + 1

    print("TASK", ray.get(plus_one.remote(41)), flush=True)
    print("CPUS", ray.cluster_resources()["CPU"], flush=True)  # num_cpus reached the embedded Ray
    print("ONE", ray.get_runtime_context().gcs_address == __import__("os").environ["RAY_ADDRESS"], flush=True)
    try:
        ray.init()
    except RuntimeError as exc:
        print("REINIT", "ignore_reinit_error" in str(exc), flush=True)
    print("SAME", bool(ray.init(ignore_reinit_error=True)), flush=True)
    started = time.monotonic()
    trainwire.shutdown()
    ray.shutdown()  # after trainwire's: nothing left to stop
    print("DOWN", ray.is_initialized(), round(time.monotonic() - started), flush=True)
    """
)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("program", sorted(RAY_PROGRAMS))
def test_a_programs_own_ray_works_after_init_with_token_auth_on(tmp_path, program):
    # A user's program as it runs outside the tests: none of the test session's Ray settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINWIRE_", "RAY_"))}
    env["HOME"] = str(tmp_path)  # the embedded coordinator's state, and Ray's auth token, its own
    done = subprocess.run(
        [sys.executable, "-c", RAY_PROGRAMS[program] + RAY_WORK],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["COUNT"] == "10"
    assert lines["TASK"] == "42"
    assert lines["CPUS"] == "4.0"
    assert lines["ONE"] == "True"  # the embedded coordinator's Ray: one Ray on these cores
    assert lines["REINIT"] == "True" and lines["SAME"] == "True"
    down, seconds = lines["DOWN"].split()
    assert down == "False" and int(seconds) < 20, lines["DOWN"]
    assert (tmp_path / ".ray" / "auth_token").exists()  # Ray's token authentication was on
