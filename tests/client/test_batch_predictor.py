"""BatchPredictor on Ray Data, and one StandardScaler model scored in process, in batch and by the service."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from serving_fixtures import XGB_PARAMS, commit_checkpoint

from trainwire.batch_predictor import BatchPredictor
from trainwire.xgboost.predictor import XGBoostPredictor

pytestmark = pytest.mark.timeout(300)


def score_in_batch(checkpoint, frame: pd.DataFrame, **kwargs) -> pd.DataFrame:
    import ray.data

    ds = ray.data.from_pandas(frame.assign(row_id=np.arange(len(frame))))
    out = BatchPredictor.from_checkpoint(checkpoint, XGBoostPredictor).predict(
        ds, batch_size=32, min_scoring_workers=1, max_scoring_workers=2, keep_columns=["row_id"], **kwargs
    )
    return out.to_pandas().sort_values("row_id").reset_index(drop=True)


def test_two_scoring_workers_equal_in_process_row_for_row(xgb_result, valid_x):
    import ray.data

    expected = XGBoostPredictor.from_checkpoint(xgb_result.checkpoint).predict(valid_x)
    # Several blocks, so both scoring workers get batches.
    ds = ray.data.from_pandas(valid_x.assign(row_id=np.arange(len(valid_x)) + 1000)).repartition(4)
    out = (
        BatchPredictor.from_checkpoint(xgb_result.checkpoint, XGBoostPredictor)
        .predict(ds, batch_size=16, min_scoring_workers=2, max_scoring_workers=2, keep_columns=["row_id"])
        .to_pandas()
    )
    assert sorted(out.columns) == ["predictions", "row_id"]
    out = out.sort_values("row_id").reset_index(drop=True)
    np.testing.assert_array_equal(out["row_id"], np.arange(len(valid_x)) + 1000)
    np.testing.assert_array_equal(out["predictions"], expected["predictions"])


def test_feature_columns_pick_the_inputs(xgb_result, valid_x):
    frame = valid_x.assign(noise=1.0)
    out = score_in_batch(xgb_result.checkpoint, frame, feature_columns=list(valid_x.columns))
    expected = XGBoostPredictor.from_checkpoint(xgb_result.checkpoint).predict(valid_x)
    np.testing.assert_array_equal(out["predictions"], expected["predictions"])


def test_rejects_bad_pool_sizes(xgb_result):
    from trainwire_core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="min_scoring_workers"):
        BatchPredictor(xgb_result.checkpoint, XGBoostPredictor).predict(
            pd.DataFrame({"a": [1.0]}), min_scoring_workers=3, max_scoring_workers=2
        )


def test_standard_scaled_model_same_in_process_in_batch_and_served(
    store, predictor_client, cancer_data, features, fitted_scaler, valid_x
):
    import xgboost

    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    train_df = cancer_data[0]
    scaled = fitted_scaler.transform_batch(train_df[features].copy())
    booster = xgboost.train(XGB_PARAMS, xgboost.DMatrix(scaled, label=train_df["target"]), 8)
    ckpt = XGBoostCheckpoint.from_model(booster, preprocessor=fitted_scaler)
    commit_checkpoint(store, "pred-scaled-run", "pred-scaled", "c1", ckpt.path)

    in_process = XGBoostPredictor.from_checkpoint(ckpt).predict(valid_x)
    # The preprocessor matters: the raw rows scored without it give other answers.
    assert not np.array_equal(XGBoostPredictor(booster).predict(valid_x)["predictions"], in_process["predictions"])
    batch = score_in_batch(ckpt, valid_x)
    np.testing.assert_array_equal(batch["predictions"], in_process["predictions"])
    served = predictor_client.predict("pred-scaled", valid_x)
    pd.testing.assert_frame_equal(served, in_process)
