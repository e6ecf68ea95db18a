"""Fixtures of the serving tests, SDK and service alike: models trained once per session, a predictor on the
coordinator's store (a plugin of tests/conftest.py, so tests/client and tests/predictor share one of each)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from trainwire.config import CheckpointConfig
from trainwire_core.storage import Store

XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3, "nthread": 1}


def torch_loop(config: dict[str, Any]) -> None:
    """A tiny MLP trained data-parallel; every rank reports a checkpoint, as Ray Train loops do."""
    import torch

    from trainwire import train
    from trainwire.torch import prepare_model
    from trainwire.torch.checkpoint import TorchCheckpoint

    torch.manual_seed(0)
    x = torch.tensor(config["x"], dtype=torch.float32)
    y = torch.tensor(config["y"], dtype=torch.float32).reshape(-1, 1)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(x.shape[1], 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for epoch in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()
        train.report({"loss": float(loss), "epoch": epoch}, checkpoint=TorchCheckpoint.from_model(model))


@pytest.fixture(scope="session")
def features(cancer_data) -> list[str]:
    return [c for c in cancer_data[0].columns if c != "target"]


@pytest.fixture(scope="session")
def valid_x(cancer_data, features) -> pd.DataFrame:
    """Rows to score: the validation split without its label."""
    return cancer_data[1][features]


@pytest.fixture(scope="session")
def xgb_result(coordinator, cancer_data):
    """An XGBoost model trained by a real Fit (2 workers), served as "pred-cancer-xgb"."""
    from trainwire.config import RunConfig, ScalingConfig
    from trainwire.xgboost import XGBoostTrainer

    return XGBoostTrainer(
        params=XGB_PARAMS,
        label_column="target",
        num_boost_round=10,
        datasets={"train": cancer_data[0]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="pred-cancer-xgb", verbose=0),
    ).fit()


@pytest.fixture(scope="session")
def torch_result(coordinator, cancer_data, features):
    """A torch MLP trained by a real Fit (2 workers, DDP), served as "pred-cancer-torch"."""
    from trainwire.config import RunConfig, ScalingConfig
    from trainwire.torch import TorchTrainer

    train_df = cancer_data[0]
    return TorchTrainer(
        torch_loop,
        train_loop_config={"x": train_df[features].to_numpy(np.float32), "y": train_df["target"].to_numpy()},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="pred-cancer-torch", verbose=0),
    ).fit()


@pytest.fixture(scope="session")
def fitted_scaler(ray_cluster, cancer_data, features):
    """A StandardScaler fitted on the training split (a Ray Data preprocessor)."""
    import ray.data
    from ray.data.preprocessors import StandardScaler

    scaler = StandardScaler(columns=features)
    scaler.fit(ray.data.from_pandas(cancer_data[0][features]))
    return scaler


@pytest.fixture(scope="session")
def local_booster(cancer_data, features):
    """An XGBoost booster trained in process (fast; for tests that need no Fit)."""
    import xgboost

    train_df = cancer_data[0]
    return xgboost.train(XGB_PARAMS, xgboost.DMatrix(train_df[features], label=train_df["target"]), 8)


def commit_checkpoint(
    store: Store,
    run_id: str,
    run_name: str,
    checkpoint_id: str,
    local_dir: str,
    index: int = 1,
    config: CheckpointConfig | None = None,
    manager: Any = None,
) -> Any:
    """Commits a local checkpoint directory into the store the way the coordinator does."""
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager

    manager = manager or CheckpointManager(store, run_id, run_name, config or CheckpointConfig())
    files = store.upload_dir(local_dir, store.checkpoint_dir(run_id, checkpoint_id))
    manager.commit(checkpoint_id, index, {"index": index}, files)
    return manager


@pytest.fixture(scope="session")
def predictor(store):
    """A predictor (PredictorThread, port 0) on the coordinator's shared store."""
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(
        # Transport tests compare served outputs bit for bit with in-process predict; compiled
        # forests agree within 1e-7 and have their own tests (test_compiled_trees.py).
        PredictorSettings(
            port=0, store=store.uri, index_refresh_s=0.2, max_message_bytes=4 * 1024 * 1024, compile_tree_models=False
        )
    )
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="session")
def predictor_address(predictor) -> str:
    return predictor.server.address


@pytest.fixture
def predictor_client(predictor_address):
    from trainwire.predictor_client import PredictorClient

    with PredictorClient(predictor_address) as c:
        yield c


@pytest.fixture(scope="session")
def scratch_dir():
    with tempfile.TemporaryDirectory(prefix="trainwire-pred-") as d:
        yield d


@contextlib.contextmanager
def served_language_model(
    folder: Path, run: str, name: str, model: Any, tokenizer: Any, **settings: Any
) -> Iterator[Any]:
    """A predictor serving ``model`` (committed as run ``run``, named ``name``) from a store in ``folder``."""
    from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = Store(folder.as_uri())
    commit_checkpoint(store, run, name, "c1", HuggingFaceCheckpoint.from_model(model, tokenizer).path)
    thread = PredictorThread(PredictorSettings(port=0, http_port=0, store=store.uri, **settings))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()
