"""LightGBMTrainer: data-parallel LightGBM across two workers."""

from __future__ import annotations

import json
import os

import lightgbm
import numpy as np
import pytest

from trainwire import RunConfig, ScalingConfig
from trainwire.lightgbm import LightGBMCheckpoint, LightGBMTrainer

pytestmark = pytest.mark.timeout(240)

PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "seed": 0}


@pytest.fixture(scope="module")
def lgb_result(coordinator, cancer_data):
    train_df, valid_df = cancer_data
    return LightGBMTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=20,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="cancer-lgb", verbose=0),
    ).fit()


def test_metrics_of_every_round(lgb_result):
    df = lgb_result.metrics_dataframe
    assert list(df["training_iteration"]) == list(range(1, 21))
    for column in ("train-binary_logloss", "valid-binary_logloss", "valid-binary_error"):
        assert df[column].notna().all()
    assert df["train-binary_logloss"].iloc[-1] < df["train-binary_logloss"].iloc[0]


def test_both_workers_build_the_same_model_from_their_own_rows(lgb_result, cancer_data):
    with lgb_result.checkpoint.as_directory() as d:
        summaries = [json.load(open(os.path.join(d, f"worker_{rank}.json"))) for rank in (0, 1)]
    assert [s["world_size"] for s in summaries] == [2, 2]
    assert summaries[0]["model_sha256"] == summaries[1]["model_sha256"]
    rows = [s["num_rows"] for s in summaries]
    assert sum(rows) == len(cancer_data[0]) and min(rows) > 0


def test_the_model_loads_with_plain_lightgbm_and_scores_like_one_process(lgb_result, cancer_data):
    train_df, valid_df = cancer_data
    assert isinstance(lgb_result.checkpoint, LightGBMCheckpoint)
    with lgb_result.checkpoint.as_directory() as d:
        booster = lightgbm.Booster(model_file=os.path.join(d, "model.txt"))
    features = valid_df.drop(columns=["target"])
    single = lightgbm.train(
        {**PARAMS, "verbose": -1},
        lightgbm.Dataset(train_df.drop(columns=["target"]), label=train_df["target"]),
        num_boost_round=20,
    )

    def accuracy(model):
        return float(((model.predict(features) > 0.5) == valid_df["target"]).mean())

    assert accuracy(booster) > 0.9
    assert accuracy(booster) == pytest.approx(accuracy(single), abs=0.03)
    assert lgb_result.checkpoint.get_metadata()["framework"] == "lightgbm"


def test_lightgbm_predictor_in_process_and_served(lgb_result, cancer_data, tmp_path):
    from trainwire import PredictorClient
    from trainwire.lightgbm import LightGBMPredictor
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    features = cancer_data[1].drop(columns=["target"])
    local = LightGBMPredictor.from_checkpoint(lgb_result.checkpoint).predict(features)
    assert local["predictions"].between(0, 1).all()
    store_root = lgb_result.path.split("/runs/")[0]
    server = PredictorThread(PredictorSettings(port=0, store=store_root))
    address = server.start()
    try:
        with PredictorClient(address) as client:
            served = client.predict("cancer-lgb", features)
    finally:
        server.stop()
    np.testing.assert_allclose(served["predictions"], local["predictions"], rtol=1e-6)
