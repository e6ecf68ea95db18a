"""XGBoostTrainer end to end: two workers, per-round metrics, a committed booster."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xgboost

from trainwire import CheckpointConfig, RunConfig, ScalingConfig
from trainwire.xgboost import XGBoostCheckpoint, XGBoostTrainer

pytestmark = pytest.mark.timeout(240)

PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "tree_method": "hist", "seed": 0}


@pytest.fixture(scope="module")
def cancer_result(coordinator, cancer_data):
    train_df, valid_df = cancer_data
    return XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=50,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="cancer",
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="valid-logloss", checkpoint_score_order="min"
            ),
        ),
    ).fit()


def _accuracy(booster: xgboost.Booster, df) -> float:
    pred = booster.predict(xgboost.DMatrix(df.drop(columns=["target"]))) > 0.5
    return float((pred == df["target"].to_numpy()).mean())


def test_metrics_of_every_round_for_train_and_valid(cancer_result):
    df = cancer_result.metrics_dataframe
    assert len(df) == 50
    for column in ("train-logloss", "train-error", "valid-logloss", "valid-error"):
        assert column in df.columns
        assert df[column].notna().all()
    assert list(df["training_iteration"]) == list(range(1, 51))
    # Boosting lowers the training loss round after round.
    assert df["train-logloss"].iloc[-1] < df["train-logloss"].iloc[0] / 10
    assert cancer_result.metrics["valid-logloss"] == pytest.approx(df["valid-logloss"].iloc[-1])


def test_both_workers_end_with_the_same_booster_trained_on_their_own_shards(cancer_result, cancer_data):
    with cancer_result.checkpoint.as_directory() as d:
        summaries = [json.load(open(os.path.join(d, f"worker_{rank}.json"))) for rank in (0, 1)]
        model_bytes = open(os.path.join(d, "model.ubj"), "rb").read()
    assert [s["world_size"] for s in summaries] == [2, 2]
    assert summaries[0]["model_sha256"] == summaries[1]["model_sha256"]
    import hashlib

    assert hashlib.sha256(model_bytes).hexdigest() == summaries[0]["model_sha256"]
    # Each worker trained on its half of the rows; together on all of them.
    rows = [s["num_rows"] for s in summaries]
    assert sum(rows) == len(cancer_data[0]) and min(rows) > 0


def test_checkpoint_loads_with_plain_xgboost_and_matches_single_process(cancer_result, cancer_data, tmp_path):
    train_df, valid_df = cancer_data
    path = cancer_result.checkpoint.to_directory(str(tmp_path / "model_dir"))
    booster = xgboost.Booster(model_file=os.path.join(path, "model.ubj"))
    assert booster.num_boosted_rounds() == 50
    single = xgboost.train(
        PARAMS,
        xgboost.DMatrix(train_df.drop(columns=["target"]), label=train_df["target"]),
        num_boost_round=50,
    )
    assert _accuracy(booster, valid_df) == pytest.approx(_accuracy(single, valid_df), abs=0.03)
    assert _accuracy(booster, valid_df) > 0.9
    assert isinstance(cancer_result.checkpoint, XGBoostCheckpoint)
    np.testing.assert_allclose(
        XGBoostTrainer.get_model(cancer_result.checkpoint).predict(xgboost.DMatrix(valid_df.drop(columns=["target"]))),
        booster.predict(xgboost.DMatrix(valid_df.drop(columns=["target"]))),
    )


def test_result_fields(cancer_result):
    assert cancer_result.name == "cancer"
    assert cancer_result.state == "SUCCEEDED"
    assert cancer_result.error is None
    assert cancer_result.path.endswith(cancer_result.run_id)
    assert cancer_result.best_checkpoints[0][0] == cancer_result.checkpoint
    meta = cancer_result.checkpoint.get_metadata()
    assert meta["framework"] == "xgboost" and meta["label_column"] == "target"
    assert "target" not in meta["feature_columns"] and len(meta["feature_columns"]) == 30


def test_checkpoint_frequency_and_resume(coordinator, cancer_data):
    train_df, _ = cancer_data
    first = XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=6,
        datasets={"train": train_df},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=2), verbose=0),
    ).fit()
    assert [m["training_iteration"] for _, m in first.best_checkpoints] == [6, 4, 2]
    resumed = XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=10,
        datasets={"train": train_df},
        scaling_config=ScalingConfig(num_workers=1),
        resume_from_checkpoint=first.checkpoint,
        run_config=RunConfig(verbose=0),
    ).fit()
    # Ray Train semantics: num_boost_round counts the rounds already in the checkpoint.
    assert XGBoostTrainer.get_model(resumed.checkpoint).num_boosted_rounds() == 10
    assert list(resumed.metrics_dataframe["training_iteration"]) == [7, 8, 9, 10]


def _worker_pids(result) -> list[int]:
    with result.checkpoint.as_directory() as d:
        return [json.load(open(os.path.join(d, f"worker_{rank}.json")))["pid"] for rank in (0, 1)]


def test_warm_workers_serve_the_next_run_of_the_same_shape(coordinator, cancer_data):
    train_df, _ = cancer_data

    def fit():
        return XGBoostTrainer(
            params=PARAMS,
            label_column="target",
            num_boost_round=3,
            datasets={"train": train_df},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(verbose=0),
        ).fit()

    # The first fit may itself reuse a group an earlier test of the same shape left warm.
    first = fit()
    reused_before = coordinator.server.runs.pool.reused
    second = fit()
    assert _worker_pids(first) == _worker_pids(second)
    assert coordinator.server.runs.pool.reused == reused_before + 1
    # Same model from warm workers: no state leaks from one run into the next.
    assert (
        XGBoostTrainer.get_model(first.checkpoint).save_raw() == XGBoostTrainer.get_model(second.checkpoint).save_raw()
    )
