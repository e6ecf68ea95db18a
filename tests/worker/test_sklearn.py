"""SklearnTrainer: one estimator on one worker, CV scores in the metrics."""

from __future__ import annotations

import pytest
from sklearn.ensemble import RandomForestClassifier

from trainwire import RunConfig
from trainwire.sklearn import SklearnCheckpoint, SklearnTrainer
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(180)


def test_fits_scores_and_cross_validates(coordinator, cancer_data):
    train_df, valid_df = cancer_data
    result = SklearnTrainer(
        estimator=RandomForestClassifier(n_estimators=20, random_state=0),
        label_column="target",
        datasets={"train": train_df, "valid": valid_df},
        cv=3,
        scoring="accuracy",
        run_config=RunConfig(name="forest", verbose=0),
    ).fit()
    assert len(result.metrics["cv/test_score"]) == 3
    assert result.metrics["cv/test_score_mean"] > 0.85
    assert result.metrics["valid/score"] > 0.9
    assert isinstance(result.checkpoint, SklearnCheckpoint)
    estimator = result.checkpoint.get_estimator()
    features = valid_df.drop(columns=["target"])
    assert estimator.score(features, valid_df["target"]) == pytest.approx(result.metrics["valid/score"])
    meta = result.checkpoint.get_metadata()
    assert meta["feature_columns"] == list(features.columns)


def test_cv_must_be_at_least_two():
    with pytest.raises(InvalidArgumentError) as info:
        SklearnTrainer(estimator=RandomForestClassifier(), label_column="target", cv=1)
    assert info.value.field == "sklearn.cv"


def test_trainer_resources_are_what_its_one_worker_reserves():
    """As Ray's SklearnTrainer: trainer_resources={"CPU": 2} reserves 2 CPUs, not 2 + a worker's 1."""
    from trainwire import ScalingConfig
    from trainwire_coordinator.backends import get_backend
    from trainwire_coordinator.execution.placement import bundles_for
    from trainwire_core.v1 import coordinator_pb2

    scaling = coordinator_pb2.FitRequest(scaling_config=ScalingConfig(trainer_resources={"CPU": 2}).to_proto())
    assert bundles_for(get_backend("sklearn").placement_scaling(scaling)) == [{"CPU": 2.0}]
    assert bundles_for(get_backend("torch").placement_scaling(scaling)) == [{"CPU": 3.0}]  # a trainer beside
    plain = coordinator_pb2.FitRequest(scaling_config=ScalingConfig().to_proto())
    assert bundles_for(get_backend("sklearn").placement_scaling(plain)) == [{"CPU": 1.0}]
