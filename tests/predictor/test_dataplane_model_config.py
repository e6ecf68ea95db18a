"""Triton's model configuration extension and integer versions, through tritonclient (gRPC and HTTP).

Three XGBoost checkpoints are committed to a store of this module's own, keeping one:
the numbers 1, 2, 3 are given in commit order and the dropped ones are not reused. A
real predictor answers ``get_model_config`` as Triton's clients read it (max batch size,
inputs without the batch dimension, integer versions), takes a number wherever a version
goes, and reports numbers in its statistics and repository index (tools parse them as
integers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from serving_fixtures import commit_checkpoint

from trainwire.config import CheckpointConfig

MODEL = "config-xgb"


@pytest.fixture(scope="module")
def server(tmp_path_factory, local_booster) -> Iterator[Any]:
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire_core.storage import Store
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(tmp_path_factory.mktemp("config-store").as_uri())
    ckpt = XGBoostCheckpoint.from_model(local_booster)
    manager = None
    for n in (1, 2, 3):
        manager = commit_checkpoint(
            store, "config-run", MODEL, f"checkpoint_00000{n}", ckpt.path, n, CheckpointConfig(num_to_keep=2), manager
        )
    thread = PredictorThread(
        PredictorSettings(port=0, http_port=0, store=store.uri, index_refresh_s=0.2, compile_tree_models=False)
    )
    thread.start()
    yield thread.server
    thread.stop()


def test_numbers_are_given_in_commit_order_and_never_reused(server):
    from trainwire_core.store_documents import CheckpointIndex

    index = CheckpointIndex.read(server.models.store, "config-run")
    assert [(c.id, c.version) for c in index.checkpoints] == [("checkpoint_000002", 2), ("checkpoint_000003", 3)]
    assert index.last_version == 3


def test_grpc_model_config_as_tritonclient_reads_it(server, valid_x):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.address)
    config = client.get_model_config(MODEL, as_json=True)["config"]
    assert config["name"] == MODEL and config["backend"] == "xgboost"
    assert int(config["max_batch_size"]) >= 64
    # A column per feature, a scalar per row: dims [1] reshaped to [], as Triton's configs say it.
    assert [t["name"] for t in config["input"]] == list(valid_x.columns)
    assert {(t["data_type"], tuple(int(d) for d in t["dims"])) for t in config["input"]} == {("TYPE_FP64", (1,))}
    assert config["input"][0]["reshape"] == {} or config["input"][0]["reshape"].get("shape", []) == []
    assert config["parameters"]["version"]["string_value"] == "3"  # the latest, by default
    assert client.get_model_config(MODEL, "2", as_json=True)["config"]["parameters"]["version"]["string_value"] == "2"
    with pytest.raises(grpcclient.InferenceServerException) as err:
        client.get_model_config(MODEL, "1")  # dropped by retention: not reused, not found
    assert "StatusCode.NOT_FOUND" in str(err.value.status())


def test_http_config_numbers_in_infer_statistics_and_index(server, valid_x, local_booster):
    import tritonclient.http as httpclient
    import xgboost

    client = httpclient.InferenceServerClient(server.http_address)
    config = client.get_model_config(MODEL, "3")
    assert config["max_batch_size"] >= 64 and config["input"][0] == {
        "name": valid_x.columns[0],
        "data_type": "TYPE_FP64",
        "dims": [1],
        "reshape": {"shape": []},
    }
    # What perf_analyzer sends from the config: [batch] + dims for every input.
    rows = valid_x.to_numpy(np.float64)[:4]
    tensors = []
    for i, t in enumerate(config["input"]):
        tensor = httpclient.InferInput(t["name"], [4, *t["dims"]], "FP64")
        tensor.set_data_from_numpy(rows[:, i : i + 1])
        tensors.append(tensor)
    answer = client.infer(MODEL, tensors, model_version="2")
    expected = local_booster.predict(xgboost.DMatrix(valid_x[:4]))
    out = answer.get_response()["outputs"][0]["name"]
    np.testing.assert_allclose(answer.as_numpy(out).reshape(-1), expected, rtol=1e-6)
    stats = client.get_inference_statistics(MODEL)["model_stats"]
    assert {s["version"] for s in stats} == {"2"} and int(stats[0]["version"]) == 2  # what perf_analyzer parses
    index = {(m["name"], m["version"]) for m in client.get_model_repository_index()}
    assert {(MODEL, "2"), (MODEL, "3")} <= index
