"""A run that takes every real CPU still fits its preprocessor (issue 6).

The session Ray of the other tests has more logical CPUs than the machine, so
this runs in a subprocess: an embedded coordinator on a local Ray with the
machine's real CPU count, and a run whose workers reserve all of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(200)

SCRIPT = textwrap.dedent(
    """
    import os

    from ray.data.preprocessors import StandardScaler
    from sklearn.datasets import load_breast_cancer

    import trainwire
    from trainwire import RunConfig, ScalingConfig
    from trainwire.xgboost import XGBoostTrainer

    df = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    trainwire.init()
    result = XGBoostTrainer(
        params={"objective": "binary:logistic", "eval_metric": ["logloss"], "tree_method": "hist"},
        label_column="target",
        num_boost_round=5,
        datasets={"train": df, "valid": df},
        scaling_config=ScalingConfig(num_workers=os.cpu_count()),
        preprocessor=StandardScaler(columns=["mean_radius", "mean_texture"]),
        run_config=RunConfig(name="real-cpus", verbose=0),
    ).fit()
    print("LOGLOSS", result.metrics["valid-logloss"])
    print("CHECKPOINT", result.checkpoint.uri)
    trainwire.shutdown()
    """
)


def test_a_run_on_every_real_cpu_fits_its_preprocessor(tmp_path):
    script = tmp_path / "fit_real_cpus.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINWIRE_ADDRESS", "RAY_ADDRESS")}
    env["TRAINWIRE_COORDINATOR_STORE"] = str(tmp_path / "store")
    env["TRAINWIRE_COORDINATOR_STATE"] = str(tmp_path / "state.db")
    env.pop("TRAINWIRE_COORDINATOR_RAY_NUM_CPUS", None)
    # Its own session, so a hung fit's embedded coordinator and Ray end with it.
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"the fit did not finish within 150 s:\n{stderr[-3000:]}")
    assert proc.returncode == 0, stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
    assert float(lines["LOGLOSS"]) < 0.5
    assert lines["CHECKPOINT"].startswith(f"file://{tmp_path}/store/runs/")
