"""XGBoost as every trainwire component sees it (see ``trainwire.frameworks``)."""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="xgboost",
    trainer="trainwire.xgboost.trainer:XGBoostTrainer",
    checkpoint="trainwire.xgboost.trainer:XGBoostCheckpoint",
    predictor="trainwire.xgboost.predictor:XGBoostPredictor",
    backend="trainwire_worker.backends.xgboost:XGBoostBackend",
    model_file="model.ubj",
    platform="xgboost",
    # Many small batches at once: one thread each (results are the same).
    serving_kwargs={"nthread": 1},
    compiles_trees=True,
)
