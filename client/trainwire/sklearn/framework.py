"""scikit-learn as every trainwire component sees it (see ``trainwire_core.frameworks``)."""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="sklearn",
    trainer="trainwire.sklearn.trainer:SklearnTrainer",
    checkpoint="trainwire.sklearn.checkpoint:SklearnCheckpoint",
    predictor="trainwire.sklearn.predictor:SklearnPredictor",
    model_file="model.pkl",
    platform="sklearn",
    detection_order=7,
    module="sklearn",
    package="scikit-learn",
)
