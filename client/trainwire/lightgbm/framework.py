"""LightGBM as every trainwire component sees it (see ``trainwire.frameworks``)."""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="lightgbm",
    trainer="trainwire.lightgbm.trainer:LightGBMTrainer",
    checkpoint="trainwire.lightgbm.trainer:LightGBMCheckpoint",
    predictor="trainwire.lightgbm.predictor:LightGBMPredictor",
    backend="trainwire_worker.backends.lightgbm:LightGBMBackend",
    model_file="model.txt",
    platform="lightgbm",
    # Many small batches at once: one thread each (results are the same).
    serving_kwargs={"num_threads": 1},
    compiles_trees=True,
)
