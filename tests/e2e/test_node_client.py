"""The Node.js client (clients/node): stubs from protos/, a real XGBoost fit, WatchRun, ModelInfer.

Runs ``npm ci`` when clients/node has no node_modules, then drives
``quickstart.js`` against the session's coordinator and a predictor (with a
bearer token) on the same store, and checks its predictions against the
Python SDK's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(300)

NODE_DIR = Path(__file__).resolve().parents[2] / "clients" / "node"
ROUNDS = 8
NUM_ROWS = 7
TOKEN = "node-quickstart-token"


def _installed_as_locked(directory: Path) -> bool:
    """True when node_modules holds exactly the package versions of package-lock.json."""
    try:
        installed = json.loads((directory / "node_modules" / ".package-lock.json").read_text())["packages"]
    except (OSError, ValueError, KeyError):
        return False
    locked = json.loads((directory / "package-lock.json").read_text())["packages"]
    return {k: v.get("version") for k, v in installed.items()} == {
        k: v.get("version")
        for k, v in locked.items()
        if k  # "" is the project itself
    }


@pytest.fixture(scope="module")
def node_dir() -> Path:
    """clients/node with its locked dependencies installed (``npm ci`` when node_modules is missing)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not on PATH: the Node.js client cannot be tested here")
    if not _installed_as_locked(NODE_DIR):
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True, timeout=240
        )
        assert proc.returncode == 0, f"npm ci failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return NODE_DIR


@pytest.fixture(scope="module")
def token_predictor(store):
    """A predictor on the coordinator's store that requires a bearer token."""
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, index_refresh_s=0.2, auth_token=TOKEN))
    thread.start()
    yield thread
    thread.stop()


def run_node(node_dir: Path, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWIRE_")}
    full_env.update(env or {})
    return subprocess.run(
        ["node", "quickstart.js", *args], cwd=node_dir, env=full_env, capture_output=True, text=True, timeout=180
    )


def test_quickstart_fits_watches_and_predicts(
    node_dir, coordinator_address, token_predictor, client, cancer_data, tmp_path
):
    from trainwire.xgboost import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor
    from trainwire_core.v1 import common_pb2

    train_df, valid_df = cancer_data
    train_csv, valid_parquet, rows_csv = tmp_path / "train.csv", tmp_path / "valid.parquet", tmp_path / "rows.csv"
    train_df.to_csv(train_csv, index=False)  # uploaded by the client as Arrow
    valid_df.to_parquet(valid_parquet, index=False)  # given to the coordinator as a URI
    valid_df.to_csv(rows_csv, index=False)  # the rows the client scores (label dropped)
    params = {"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3, "nthread": 1, "seed": 0}
    working_dir = tmp_path / "project"
    (working_dir / "conf").mkdir(parents=True)
    (working_dir / "conf" / "notes.txt").write_text("shipped from Node.js\n")

    proc = run_node(
        node_dir,
        [
            *("--label", "target", "--rounds", str(ROUNDS), "--workers", "2", "--name", "node-quickstart-xgb"),
            *("--params", json.dumps(params), "--upload", f"train={train_csv}"),
            *("--dataset", f"valid=file://{valid_parquet}", "--rows", str(rows_csv), "--num-rows", str(NUM_ROWS)),
            *("--working-dir", str(working_dir), "--env", "MODE=fast", "--logs"),
        ],
        env={
            "TRAINWIRE_ADDRESS": coordinator_address,
            "TRAINWIRE_PREDICTOR_ADDRESS": token_predictor.server.address,
            "TRAINWIRE_AUTH_TOKEN": TOKEN,
        },
    )
    assert proc.returncode == 0, f"node exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = [line["event"] for line in lines]

    uploaded = lines[kinds.index("uploaded")]
    assert uploaded["dataset"] == "train" and uploaded["num_rows"] == len(train_df)
    assert uploaded["ref"]["uri"] == f"datasets/{uploaded['sha256']}"

    # The working_dir travelled as a package stored by its content; the run carries it and the variable.
    shipped = next(line for line in lines if line["event"] == "uploaded" and "working_dir" in line)
    assert shipped["num_files"] == 1
    run_id = lines[kinds.index("run_started")]["run_id"]
    request_env = client.get_run(run_id).request.run_config.runtime_env
    assert request_env.working_dir == shipped["sha256"] and dict(request_env.env_vars) == {"MODE": "fast"}
    # The workers' output followed live: rank 0's evaluation line for every round.
    logged = [line for line in lines if line["event"] == "log"]
    assert all(line["rank"] == 0 and line["attempt"] == 1 for line in logged if "train-logloss" in line["text"])
    assert sum("train-logloss" in line["text"] for line in logged) == ROUNDS, logged

    # Every event printed as it came, in order; one metrics line per boosting round while RUNNING.
    events = [line for line in lines if "event_id" in line]
    assert [e["event_id"] for e in events] == sorted({e["event_id"] for e in events})
    states = [e["state"] for e in events if e["event"] == "state"]
    assert states[-1] == "SUCCEEDED" and "RUNNING" in states
    metrics = [e for e in events if e["event"] == "metrics"]
    assert [m["metrics"]["training_iteration"] for m in metrics] == list(range(1, ROUNDS + 1))
    assert all("train-logloss" in m["metrics"] and "valid-logloss" in m["metrics"] for m in metrics)
    running_at = next(i for i, e in enumerate(events) if e.get("state") == "RUNNING")
    ended_at = next(i for i, e in enumerate(events) if e.get("state") == "SUCCEEDED")
    assert all(running_at < events.index(m) < ended_at for m in metrics)

    ended = lines[kinds.index("run_ended")]
    assert ended["run_id"] == run_id and ended["state"] == "SUCCEEDED"
    run = client.get_run(run_id)
    assert run.state == common_pb2.SUCCEEDED
    assert ended["checkpoint"] == run.latest_checkpoint.uri

    # The predictor's answer equals the Python SDK's in-process prediction on the same rows.
    prediction = lines[kinds.index("prediction")]
    assert kinds[-1] == "prediction"
    assert prediction["model_name"] == run_id and prediction["num_rows"] == NUM_ROWS
    assert prediction["model_version"] == run.latest_checkpoint.checkpoint_id
    out = prediction["outputs"]["predictions"]
    assert out["datatype"] == "FP32" and out["shape"] == [NUM_ROWS]
    rows = valid_df.drop(columns=["target"]).iloc[:NUM_ROWS]
    expected = XGBoostPredictor.from_checkpoint(XGBoostCheckpoint(run.latest_checkpoint.uri)).predict(rows)
    np.testing.assert_allclose(np.array(out["data"]), expected["predictions"].to_numpy(np.float64), rtol=0, atol=1e-6)


def test_quickstart_rejects_bad_usage_before_any_call(node_dir, tmp_path):
    proc = run_node(node_dir, ["--label", "target"])
    assert proc.returncode == 2 and "give at least one --dataset or --upload" in proc.stderr
    proc = run_node(node_dir, ["--label", "target", "--dataset", f"train={tmp_path / 'x.parquet'}", "--rounds", "0"])
    assert proc.returncode == 2 and "--rounds must be an integer >= 1" in proc.stderr
    # A parquet URI is passed through, but rows to score must come from a local csv/arrow file.
    proc = run_node(node_dir, ["--label", "target", "--dataset", f"train={tmp_path / 'x.parquet'}"])
    assert proc.returncode == 2 and "give --rows FILE" in proc.stderr


def test_quickstart_exits_nonzero_when_the_run_fails(node_dir, coordinator_address, cancer_data, tmp_path):
    train_csv = tmp_path / "train.csv"
    cancer_data[0].to_csv(train_csv, index=False)
    common = [coordinator_address, "127.0.0.1:1", "--dataset", f"train={train_csv}", "--name", "node-quickstart-bad"]
    # Refused by Fit: the coordinator's status and message reach the caller.
    proc = run_node(node_dir, [*common, "--label", "no_such_column"])
    assert proc.returncode == 1
    assert "INVALID_ARGUMENT" in proc.stderr and "label column 'no_such_column'" in proc.stderr
    # Accepted, then failed on the workers: the run's end is printed, the exit status is 1.
    proc = run_node(node_dir, [*common, "--label", "target", "--params", '{"objective": "no:such"}'])
    assert proc.returncode == 1, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    errors = [line for line in lines if line["event"] == "worker_error"]
    assert errors and errors[0]["exc_type"] == "XGBoostError" and "no:such" in errors[0]["message"]
    assert lines[-1]["event"] == "run_ended" and lines[-1]["state"] == "FAILED"
    assert "ended FAILED: rank 0: XGBoostError" in proc.stderr and "Traceback" in proc.stderr
