"""XGBoost as every trainwire component sees it (see ``trainwire_core.frameworks``)."""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="xgboost",
    trainer="trainwire.xgboost.trainer:XGBoostTrainer",
    checkpoint="trainwire.xgboost.checkpoint:XGBoostCheckpoint",
    predictor="trainwire.xgboost.predictor:XGBoostPredictor",
    model_file="model.ubj",
    platform="xgboost",
    detection_order=1,
    # Many small batches at once: one thread each (results are the same).
    serving_kwargs={"nthread": 1},
    compiles_trees=True,
    # Its model file is data (UBJSON / text), read without running anything in it.
    unpickles=False,
    module="xgboost",
    package="xgboost",
)
