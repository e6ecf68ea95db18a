"""A model trained with ``preprocessor=StandardScaler(...)`` serves the same answers everywhere."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.timeout(300)


def test_trainer_preprocessor_travels_to_every_predictor(coordinator, cancer_data, features, predictor_client, valid_x):
    import ray.data
    from ray.data.preprocessors import StandardScaler

    from trainwire.batch_predictor import BatchPredictor
    from trainwire.config import RunConfig, ScalingConfig
    from trainwire.xgboost import XGBoostTrainer
    from trainwire.xgboost.predictor import XGBoostPredictor

    result = XGBoostTrainer(
        params={"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
        label_column="target",
        num_boost_round=5,
        datasets={"train": cancer_data[0]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="pred-cancer-scaled-fit", verbose=0),
        preprocessor=StandardScaler(columns=features),
    ).fit()
    assert result.checkpoint.get_preprocessor() is not None, "the trainer did not store its fitted preprocessor"
    in_process = XGBoostPredictor.from_checkpoint(result.checkpoint).predict(valid_x)
    served = predictor_client.predict("pred-cancer-scaled-fit", valid_x)
    pd.testing.assert_frame_equal(served, in_process)
    ds = ray.data.from_pandas(valid_x.assign(row_id=np.arange(len(valid_x))))
    batch = (
        BatchPredictor.from_checkpoint(result.checkpoint, XGBoostPredictor)
        .predict(ds, batch_size=64, min_scoring_workers=1, max_scoring_workers=2, keep_columns=["row_id"])
        .to_pandas()
        .sort_values("row_id")
    )
    np.testing.assert_array_equal(batch["predictions"], in_process["predictions"])
