"""``trainwire.init()`` with no address starts an embedded coordinator process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

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
