"""The ``trainwire`` target of ``mlflow deployments``: registry models served by a predictor's model repository.

A local MLflow registry (SQLite, no ``mlflow server``) holds two versions of an XGBoost model
logged and registered with MLflow's own API. MLflow finds the target through its entry point
(``get_deploy_client``, and ``mlflow deployments create`` run through MLflow's own CLI); each
deployment's predictions equal ``mlflow.pyfunc.load_model(...).predict``.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pandas as pd
import pytest

mlflow = pytest.importorskip("mlflow")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> dict[str, Any]:
    """Registered model ``churn`` (versions 1 and 2, alias ``champion`` on 1) in a SQLite registry."""
    import xgboost

    root = tmp_path_factory.mktemp("mlflow-deployments")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    rng = np.random.default_rng(0)
    x = pd.DataFrame(rng.normal(size=(64, 4)), columns=["a", "b", "c", "d"])
    y = (x["a"] - x["c"] > 0).astype(int)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        # No set_experiment: the active experiment is process-wide, and later tests use other servers.
        experiment_id = mlflow.create_experiment("e", artifact_location=str(root / "artifacts"))
        with mlflow.start_run(experiment_id=experiment_id):
            for depth in (1, 3):
                model = xgboost.XGBClassifier(n_estimators=4, max_depth=depth).fit(x, y)
                mlflow.xgboost.log_model(
                    model,
                    name=f"m{depth}",
                    registered_model_name="churn",
                    input_example=x.iloc[:2],
                    pip_requirements=[],
                )
        client = mlflow.MlflowClient(uri)
        client.set_registered_model_alias("churn", "champion", "1")
        expected = {v: np.asarray(mlflow.pyfunc.load_model(f"models:/churn/{v}").predict(x)) for v in ("1", "2")}
    finally:
        mlflow.set_tracking_uri(previous)
    assert not np.array_equal(expected["1"], expected["2"])  # the versions answer differently
    return {"root": root, "uri": uri, "x": x, "expected": expected}


@pytest.fixture(scope="module")
def predictor(registry):
    """A predictor serving an (empty) model repository, with the registry as its MLflow registry."""
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    repo = registry["root"] / "repository"
    repo.mkdir()
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=str(registry["root"] / "store"),
            index_refresh_s=0.2,
            model_repository=str(repo),
            mlflow_uri=registry["uri"],
        )
    )
    thread.start()
    try:
        yield f"trainwire:{repo}?predictor=http://{thread.server.http_address}", repo
    finally:
        thread.stop()


def test_create_predict_update_and_delete_through_mlflows_plugin_api(registry, predictor) -> None:
    from mlflow.deployments import get_deploy_client
    from mlflow.exceptions import MlflowException

    target, repo = predictor
    x, expected = registry["x"], registry["expected"]
    client = get_deploy_client(target)
    assert type(client).__module__ == "trainwire.integrations.mlflow_deployments"

    created = client.create_deployment("churn-prod", "models:/churn@champion")
    assert created["name"] == "churn-prod"
    settings = json.loads((repo / "churn-prod" / "model-settings.json").read_text())
    assert settings["implementation"] == "mlserver_mlflow.MLflowRuntime"
    assert settings["parameters"]["uri"] == "models:/churn@champion"
    assert [d["name"] for d in client.list_deployments()] == ["churn-prod"]
    got = client.get_deployment("churn-prod")
    assert got["model_uri"] == "models:/churn@champion"
    assert {v["version"] for v in got["versions"]} == {"1", "2"}
    np.testing.assert_array_equal(np.asarray(client.predict("churn-prod", x).get_predictions()).ravel(), expected["1"])

    client.update_deployment("churn-prod", model_uri="models:/churn/2")
    np.testing.assert_array_equal(np.asarray(client.predict("churn-prod", x).get_predictions()).ravel(), expected["2"])

    with pytest.raises(MlflowException) as caught:
        client.create_deployment("churn-prod", "models:/churn/1")
    assert caught.value.error_code == "RESOURCE_ALREADY_EXISTS"
    # A model the registry does not hold: refused with the predictor's reason, and no folder is left.
    with pytest.raises(MlflowException) as caught:
        client.create_deployment("ghost", "models:/nope@champion", config={"timeout_s": 10})
    assert "nope" in caught.value.message and not (repo / "ghost").exists()
    with pytest.raises(MlflowException) as caught:
        client.create_deployment("bad", "s3://bucket/model")
    assert caught.value.error_code == "INVALID_PARAMETER_VALUE"

    client.delete_deployment("churn-prod")
    client.delete_deployment("churn-prod")  # idempotent, as MLflow asks
    assert client.list_deployments() == [] and not (repo / "churn-prod").exists()
    with pytest.raises(MlflowException) as caught:
        client.get_deployment("churn-prod")
    assert caught.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_mlflow_deployments_cli_creates_and_predicts(registry, predictor, tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner
    from mlflow.deployments.cli import commands

    target, _ = predictor
    runner = CliRunner()
    result = runner.invoke(commands, ["create", "-t", target, "-m", "models:/churn/2", "--name", "cli"])
    assert result.exit_code == 0, result.output
    rows = tmp_path / "rows.json"
    registry["x"].to_json(rows, orient="records")
    out = tmp_path / "out.json"
    result = runner.invoke(
        commands, ["predict", "-t", target, "--name", "cli", "--input-path", str(rows), "--output-path", str(out)]
    )
    assert result.exit_code == 0, result.output
    got = json.loads(out.read_text())["predictions"]
    np.testing.assert_array_equal(np.asarray(got).ravel(), registry["expected"]["2"])
    assert runner.invoke(commands, ["delete", "-t", target, "--name", "cli"]).exit_code == 0


def test_run_local_serves_the_model_on_a_foreground_predictor(monkeypatch) -> None:
    """MLflow's own run_local reaches the plugin with its calling convention (no target: name first)."""
    from mlflow.deployments import run_local

    from trainwire.integrations import mlflow_deployments

    started: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(mlflow_deployments.subprocess, "run", lambda cmd, env, check: started.append((cmd, env)))
    run_local("trainwire", "churn", "models:/churn@champion", config={"port": "18000"})
    [(command, env)] = started
    repository = pathlib.Path(command[command.index("--model-repository") + 1])
    settings = json.loads((repository / "churn" / "model-settings.json").read_text())
    assert settings["parameters"]["uri"] == "models:/churn@champion"
    assert command[command.index("--http-port") + 1] == "18000" and "TRAINWIRE_PREDICTOR_MLFLOW_URI" in env
