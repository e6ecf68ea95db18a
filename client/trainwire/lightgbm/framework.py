"""LightGBM as every trainwire component sees it (see ``trainwire_core.frameworks``)."""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="lightgbm",
    trainer="trainwire.lightgbm.trainer:LightGBMTrainer",
    checkpoint="trainwire.lightgbm.checkpoint:LightGBMCheckpoint",
    predictor="trainwire.lightgbm.predictor:LightGBMPredictor",
    model_file="model.txt",
    platform="lightgbm",
    detection_order=2,
    # Many small batches at once: one thread each (results are the same).
    serving_kwargs={"num_threads": 1},
    compiles_trees=True,
    # Its model file is data (UBJSON / text), read without running anything in it.
    unpickles=False,
    module="lightgbm",
    package="lightgbm",
)
