"""schemathesis against the Open Inference Protocol's own REST document, on a real predictor.

``specs/open_inference_rest.yaml`` is kserve/open-inference-protocol's
``specification/protocol/open_inference_rest.yaml`` as published (Apache-2.0, its header kept;
``specs/LICENSE-open-inference-protocol``). The test adapts it, in memory only:

- the document writes its path parameters as ``${MODEL_NAME}``, which OpenAPI reads as a literal
  ``$`` before the parameter; every OIP server (KServe, Triton) serves ``/v2/models/<name>``, so
  the ``$`` goes;
- one run names the served model and its versions (so inference, metadata and readiness reach a
  model), another any string (paths no server has);
- the inference operation gets an example body the model takes, so a successful answer is
  checked against the schema too.

Checks: every one schemathesis has but two deliberate deviations (docs/serving/rest.md):
``status_code_conformance`` (the document lists 200 and 400 only; an unknown model is 404, as in
KServe, and a model that is not ready 400 with a body, as the protocol's text allows) and
``positive_data_acceptance`` (a tensor valid for the schema need not fit the model: ``inputs: []``
or a tensor of the wrong name is 400).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import commit_checkpoint

from trainwire_core.storage import Store

pytestmark = pytest.mark.timeout(240)

SPEC = Path(__file__).parent / "specs" / "open_inference_rest.yaml"
MODEL = "oip-xgb"
# The deviations above; everything else schemathesis checks must hold.
EXCLUDED_CHECKS = "status_code_conformance,positive_data_acceptance"


def adapted_spec(served: bool, features: int) -> dict[str, Any]:
    """The published document with the changes listed in the module's docstring."""
    doc = yaml.safe_load(SPEC.read_text())
    paths = {}
    for path, item in doc["paths"].items():
        for param in item.get("parameters", []):
            if served and param["name"] == "MODEL_NAME":
                param["schema"] = {"type": "string", "enum": [MODEL]}
            if served and param["name"] == "MODEL_VERSION":
                param["schema"] = {"type": "string", "enum": ["1", "c1"]}
        paths[path.replace("${", "{")] = item
    doc["paths"] = paths
    infer = paths["/v2/models/{MODEL_NAME}/versions/{MODEL_VERSION}/infer"]["post"]
    infer["requestBody"]["content"]["application/json"]["example"] = {
        "id": "42",
        "inputs": [{"name": "input", "shape": [1, features], "datatype": "FP64", "data": [0.5] * features}],
    }
    return doc


@pytest.fixture(scope="module")
def schemathesis_python() -> str:
    python = os.environ.get("KSERVE_PYTHON", "")
    if not python or not os.path.exists(python):
        pytest.skip(
            "the kserve peer virtualenv (schemathesis) is absent: scripts/peer_venvs.sh kserve, then KSERVE_PYTHON"
        )
    return python


@pytest.fixture(scope="module")
def server(tmp_path_factory, local_booster) -> Iterator[Any]:
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(str(tmp_path_factory.mktemp("oip") / "store"))
    commit_checkpoint(store, "run-oip", MODEL, "c1", XGBoostCheckpoint.from_model(local_booster).path)
    thread = PredictorThread(PredictorSettings(port=0, http_port=0, store=store.uri, compile_tree_models=False))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


def test_the_published_spec_is_the_one_vendored() -> None:
    doc = yaml.safe_load(SPEC.read_text())
    assert doc["info"]["license"]["name"] == "Apache 2.0"
    assert SPEC.read_text().startswith("# Copyright 2023 The KServe Authors.")
    assert set(doc["paths"]) >= {"/v2/health/live", "/v2/models/${MODEL_NAME}/versions/${MODEL_VERSION}/infer"}


@pytest.mark.parametrize(("served", "examples"), [(True, 40), (False, 10)], ids=["served-model", "any-path"])
def test_schemathesis_finds_no_5xx_and_no_response_off_the_schema(
    schemathesis_python, server, local_booster, tmp_path, served, examples
) -> None:
    spec = tmp_path / "open_inference_rest.json"
    spec.write_text(json.dumps(adapted_spec(served, local_booster.num_features())))
    schemathesis = str(Path(schemathesis_python).parent / "schemathesis")
    command = [schemathesis, "run", str(spec), "--url", f"http://{server.http_address}"]
    command += ["--checks", "all", "--exclude-checks", EXCLUDED_CHECKS, "--max-examples", str(examples)]
    command += ["--seed", "39", "--workers", "1", "--no-color", "--generation-database", "none"]
    command += ["--report", "junit", "--report-junit-path", str(tmp_path / "junit.xml")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "6 selected / 6 total" in proc.stdout
    report = (tmp_path / "junit.xml").read_text()
    assert 'failures="0"' in report and 'errors="0"' in report, report[-3000:]
    if served:
        # The example body reached the model: a 200 answer checked against inference_response.
        assert "Examples" in proc.stdout and "1 passed" in proc.stdout.split("Examples", 1)[1].split("Coverage")[0]
