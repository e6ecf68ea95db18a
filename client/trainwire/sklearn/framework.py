"""scikit-learn as every trainwire component sees it (see ``trainwire.frameworks``)."""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="sklearn",
    trainer="trainwire.sklearn.trainer:SklearnTrainer",
    checkpoint="trainwire.sklearn.trainer:SklearnCheckpoint",
    predictor="trainwire.sklearn.predictor:SklearnPredictor",
    backend="trainwire_worker.backends.sklearn:SklearnBackend",
    model_file="model.pkl",
    platform="sklearn",
)
