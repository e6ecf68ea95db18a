"""An ``mlflow deployments`` target: MLflow registry models served by a trainwire predictor.

MLflow finds it by its entry point (group ``mlflow.deployments``, name ``trainwire``)::

    export TRAINWIRE_PREDICTOR_URL=http://predictor:8000      # the predictor's REST port
    mlflow deployments create -t trainwire:/srv/models -m models:/churn@champion --name churn
    mlflow deployments predict -t trainwire:/srv/models --name churn --input-path rows.json

A deployment is a folder of the predictor's model repository (``--model-repository``): the
target's path (``trainwire:/srv/models``), else ``$TRAINWIRE_MODEL_REPOSITORY`` (a directory or an
``s3://`` URI). The folder holds only MLServer's ``model-settings.json`` naming its MLflow runtime
and the model URI; the predictor resolves that URI against its MLflow registry
(``--mlflow-uri``) and serves the model as its MLflow models (flavors, trust settings, aliases
followed within the index refresh). The predictor is ``?predictor=URL`` on the target, else
``$TRAINWIRE_PREDICTOR_URL`` (default ``http://127.0.0.1:8000``); ``$TRAINWIRE_TOKEN`` is sent as
its bearer token (loading and unloading need the ``admin`` scope). ``predict`` posts to the
predictor's ``/models/{name}/invocations``, MLflow's scoring protocol.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mlflow.deployments import BaseDeploymentClient, PredictionsResponse
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_ALREADY_EXISTS,
    RESOURCE_DOES_NOT_EXIST,
    TEMPORARILY_UNAVAILABLE,
)

from trainwire_core.storage import Store, is_path_component

TARGET = "trainwire"
SETTINGS_FILE = "model-settings.json"
# MLServer's MLflow runtime: what the predictor's model repository reads as "an MLflow model URI".
IMPLEMENTATION = "mlserver_mlflow.MLflowRuntime"
DEFAULT_PREDICTOR = "http://127.0.0.1:8000"
FLAVOR = "python_function"
_SCHEMES = ("models:/", "runs:/")


def target_help() -> str:
    """What ``mlflow deployments help -t trainwire`` prints."""
    return __doc__ or ""


def run_local(name: str, model_uri: str, flavor: str | None = None, config: dict | None = None) -> None:
    """Serves the model on a local predictor in the foreground (``mlflow deployments run-local -t trainwire``).

    MLflow calls it with the deployment's name first (``interface.run_local`` drops the target).

    A fresh model repository holds the one deployment; the predictor's REST port is ``config``'s
    ``port`` (default 8000), its gRPC port ``grpc_port`` (default 8001), and its registry MLflow's
    current tracking URI.
    """
    import mlflow

    _check(name, model_uri, flavor)
    repository = tempfile.mkdtemp(prefix="trainwire-mlflow-deployment-")
    _write(Store(repository), name, model_uri)
    port, grpc_port = str((config or {}).get("port", 8000)), str((config or {}).get("grpc_port", 8001))
    env = {**os.environ, "TRAINWIRE_PREDICTOR_MLFLOW_URI": mlflow.get_tracking_uri()}
    command = [sys.executable, "-m", "trainwire_predictor", "--model-repository", repository]
    command += ["--http-port", port, "--port", grpc_port, "--store", os.path.join(repository, ".store")]
    subprocess.run(command, env=env, check=True)


class TrainwireDeploymentClient(BaseDeploymentClient):
    """Deployments as folders of a trainwire predictor's model repository.

    Args:
        target_uri: ``trainwire``, or ``trainwire:/<model repository>`` with an optional
            ``?predictor=<REST URL>``.
    """

    def __init__(self, target_uri: str) -> None:
        super().__init__(target_uri)
        parsed = urllib.parse.urlparse(target_uri)
        query = urllib.parse.parse_qs(parsed.query)
        path = parsed.path if parsed.scheme else ""
        self.repository = path or os.environ.get("TRAINWIRE_MODEL_REPOSITORY", "")
        if not self.repository:
            raise MlflowException(
                "the trainwire target needs the predictor's model repository: -t trainwire:/<directory>, "
                "or TRAINWIRE_MODEL_REPOSITORY (a directory or s3:// URI)",
                error_code=INVALID_PARAMETER_VALUE,
            )
        url = (query.get("predictor") or [os.environ.get("TRAINWIRE_PREDICTOR_URL", DEFAULT_PREDICTOR)])[0]
        self.predictor = url.rstrip("/")
        self.token = os.environ.get("TRAINWIRE_TOKEN", "")
        self.store = Store(self.repository)

    # --- deployments --------------------------------------------------------------
    def create_deployment(
        self,
        name: str,
        model_uri: str,
        flavor: str | None = None,
        config: dict | None = None,
        endpoint: str | None = None,
    ) -> dict[str, Any]:
        """Writes the deployment's folder and waits until the predictor has loaded the model.

        Raises:
            MlflowException: A bad name, URI or flavor; a deployment of that name; or a model the
                predictor cannot load (the folder is removed again, naming the predictor's reason).
        """
        _check(name, model_uri, flavor)
        if self.store.exists(self._settings_path(name)) or self.store.exists(self.store.path(name)):
            raise MlflowException(f"deployment {name!r} already exists", error_code=RESOURCE_ALREADY_EXISTS)
        _write(self.store, name, model_uri)
        try:
            self._load(name, _timeout(config))
        except MlflowException:
            self.store.delete_dir(self.store.path(name))
            raise
        return {"name": name, "flavor": FLAVOR, "model_uri": model_uri}

    def update_deployment(
        self,
        name: str,
        model_uri: str | None = None,
        flavor: str | None = None,
        config: dict | None = None,
        endpoint: str | None = None,
    ) -> dict[str, Any]:
        """Points the deployment at another model URI, then has the predictor load it afresh.

        The predictor serves the new model from the next load on; one it cannot load leaves the
        deployment on its former URI.
        """
        current = self._read(name)
        model_uri = model_uri or current
        _check(name, model_uri, flavor)
        _write(self.store, name, model_uri)
        try:
            self._unload(name)
            self._load(name, _timeout(config))
        except MlflowException:
            _write(self.store, name, current)
            self._unload(name)
            raise
        return {"name": name, "flavor": FLAVOR, "model_uri": model_uri}

    def delete_deployment(self, name: str, config: dict | None = None, endpoint: str | None = None) -> None:
        """Unloads the model and removes its folder (a deployment that is not there is no error)."""
        if not is_path_component(name) or not self.store.exists(self._settings_path(name)):
            return
        self._unload(name, strict=False)  # a deployment the predictor cannot serve goes all the same
        self.store.delete_dir(self.store.path(name))

    def list_deployments(self, endpoint: str | None = None) -> list[dict[str, Any]]:
        """Every folder of the repository that points at an MLflow model."""
        out = []
        for name in sorted(self.store.list_dir(self.store.root)):
            try:
                out.append({"name": name, "flavor": FLAVOR, "model_uri": self._read(name)})
            except MlflowException:
                continue  # a model folder of another kind: not a deployment
        return out

    def get_deployment(self, name: str, endpoint: str | None = None) -> dict[str, Any]:
        """The deployment's URI and, from the predictor's repository index, its versions and their state."""
        model_uri = self._read(name)
        index = self._request("POST", "/v2/repository/index", {})[1] or []
        versions = [
            {k: entry[k] for k in ("version", "state", "reason") if k in entry}
            for entry in index
            if entry.get("name") == name
        ]
        return {"name": name, "flavor": FLAVOR, "model_uri": model_uri, "versions": versions}

    def predict(
        self, deployment_name: str | None = None, inputs: Any = None, endpoint: str | None = None
    ) -> PredictionsResponse:
        """Scores ``inputs`` (a DataFrame, an array, or a scoring request's JSON object) on the deployment."""
        if not deployment_name or not is_path_component(deployment_name):
            raise MlflowException(f"no deployment {deployment_name!r}", error_code=RESOURCE_DOES_NOT_EXIST)
        status, doc = self._request("POST", f"/models/{deployment_name}/invocations", _scoring_request(inputs))
        if status != 200:
            raise MlflowException(
                f"deployment {deployment_name!r} answered {status}: {_reason(doc)}",
                error_code=RESOURCE_DOES_NOT_EXIST if status == 404 else INVALID_PARAMETER_VALUE,
            )
        return PredictionsResponse.from_json(json.dumps(doc))

    # --- the model repository -----------------------------------------------------
    def _settings_path(self, name: str) -> str:
        return f"{self.store.path(name)}/{SETTINGS_FILE}"

    def _read(self, name: str) -> str:
        """The model URI of deployment ``name``.

        Raises:
            MlflowException: No such deployment (RESOURCE_DOES_NOT_EXIST).
        """
        missing = MlflowException(f"no deployment {name!r}", error_code=RESOURCE_DOES_NOT_EXIST)
        if not is_path_component(name) or not self.store.exists(self._settings_path(name)):
            raise missing
        try:
            doc = json.loads(self.store.read_bytes(self._settings_path(name)))
        except (ValueError, OSError):
            raise missing from None
        uri = (doc.get("parameters") or {}).get("uri") if isinstance(doc, dict) else None
        if doc.get("implementation") != IMPLEMENTATION or not isinstance(uri, str):
            raise missing
        return uri

    # --- the predictor -------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.predictor + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw) if raw else None
            except ValueError:
                return exc.code, {"error": raw.decode("utf-8", "replace")}
        except OSError as exc:
            raise MlflowException(
                f"cannot reach the trainwire predictor at {self.predictor}: {exc}", error_code=TEMPORARILY_UNAVAILABLE
            ) from None

    def _load(self, name: str, timeout_s: float) -> None:
        """Has the predictor load the deployment, waiting while it has not yet listed the new folder."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, doc = self._request("POST", f"/v2/repository/models/{name}/load", {})
            if status == 200:
                return
            if status != 404 or time.monotonic() > deadline:
                raise MlflowException(
                    f"the trainwire predictor cannot serve deployment {name!r} ({status}): {_reason(doc)}",
                    error_code=INVALID_PARAMETER_VALUE,
                )
            time.sleep(0.2)  # the predictor lists the repository's folders every index refresh

    def _unload(self, name: str, strict: bool = True) -> None:
        status, doc = self._request("POST", f"/v2/repository/models/{name}/unload", {})
        if strict and status not in (200, 404):
            raise MlflowException(
                f"the trainwire predictor cannot unload deployment {name!r} ({status}): {_reason(doc)}",
                error_code=INVALID_PARAMETER_VALUE,
            )


def _check(name: str, model_uri: str, flavor: str | None) -> None:
    if not is_path_component(name):
        raise MlflowException(
            f"deployment name {name!r} must be a plain name (letters, digits, '.', '_', '-')",
            error_code=INVALID_PARAMETER_VALUE,
        )
    if not isinstance(model_uri, str) or not model_uri.startswith(_SCHEMES):
        raise MlflowException(
            f"model URI {model_uri!r}: the trainwire target serves registry and run models "
            "(models:/<name>/<version>, models:/<name>@<alias>, runs:/<run id>/<path>)",
            error_code=INVALID_PARAMETER_VALUE,
        )
    if flavor not in (None, FLAVOR):
        raise MlflowException(
            f"flavor {flavor!r}: the trainwire predictor serves a model by its own flavor; leave it out "
            f"or give {FLAVOR!r}",
            error_code=INVALID_PARAMETER_VALUE,
        )


def _write(store: Store, name: str, model_uri: str) -> None:
    doc = {"name": name, "implementation": IMPLEMENTATION, "parameters": {"uri": model_uri}}
    store.write_bytes(f"{store.path(name)}/{SETTINGS_FILE}", json.dumps(doc, indent=2).encode())


def _timeout(config: dict | None) -> float:
    return float((config or {}).get("timeout_s", 120))


def _reason(doc: Any) -> str:
    return str(doc.get("error") if isinstance(doc, dict) and "error" in doc else doc)


def _scoring_request(inputs: Any) -> dict[str, Any]:
    """MLflow's scoring request for ``inputs``: a DataFrame as ``dataframe_split``, a JSON object as it is."""
    import numpy as np
    import pandas as pd

    if isinstance(inputs, pd.DataFrame):
        return {"dataframe_split": json.loads(inputs.to_json(orient="split", index=False))}
    if isinstance(inputs, dict):
        return inputs
    if isinstance(inputs, np.ndarray):
        return {"inputs": inputs.tolist()}
    if isinstance(inputs, list):
        return {"inputs": inputs}
    raise MlflowException(
        f"inputs of type {type(inputs).__name__}: give a DataFrame, an array or a scoring request's JSON object",
        error_code=INVALID_PARAMETER_VALUE,
    )
