"""A model trained with ``preprocessor=StandardScaler(...)`` serves the same answers everywhere."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainwire.checkpoint import Checkpoint
from trainwire_core.v1 import common_pb2

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


def test_declarative_preprocessor_needs_no_pickled_code(
    coordinator, client, cancer_data, features, predictor_client, valid_x
):
    from trainwire.xgboost import XGBoostTrainer
    from trainwire.xgboost.predictor import XGBoostPredictor

    trainer = XGBoostTrainer(
        params={"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
        label_column="target",
        num_boost_round=5,
        datasets={"train": cancer_data[0]},
    )
    request = trainer.build_request(client)
    request.run_config.name = "pred-cancer-declarative"
    request.preprocessor.name = "StandardScaler"
    request.preprocessor.params.update({"columns": features})
    runs = coordinator.server.runs
    runs.checks.allow_pickled_code = False  # a generated client sends no code at all
    try:
        run = client.fit(request)
    finally:
        runs.checks.allow_pickled_code = True
    events = list(client.watch_run(run.run_id))
    assert events[-1].state_change.state == common_pb2.SUCCEEDED

    checkpoint = Checkpoint(client.get_run(run.run_id).latest_checkpoint.uri)
    scaler = checkpoint.get_preprocessor()
    assert type(scaler).__name__ == "StandardScaler"
    assert scaler.stats_[f"mean({features[0]})"] == pytest.approx(cancer_data[0][features[0]].mean())
    in_process = XGBoostPredictor.from_checkpoint(checkpoint).predict(valid_x)
    pd.testing.assert_frame_equal(predictor_client.predict("pred-cancer-declarative", valid_x), in_process)


def test_unknown_declarative_preprocessor_is_bad_input(client, cancer_data):
    from trainwire.xgboost import XGBoostTrainer
    from trainwire_core.errors import InvalidArgumentError

    request = XGBoostTrainer(
        params={"objective": "binary:logistic"}, label_column="target", datasets={"train": cancer_data[0]}
    ).build_request(client)
    request.preprocessor.name = "Subprocess"
    with pytest.raises(InvalidArgumentError) as info:
        client.fit(request)
    assert info.value.field == "preprocessor.name"
