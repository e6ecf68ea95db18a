"""TensorFlow as every trainwire component sees it (see ``trainwire.frameworks``)."""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="tensorflow",
    trainer="trainwire.tensorflow.trainer:TensorflowTrainer",
    checkpoint="trainwire.tensorflow.trainer:TensorflowCheckpoint",
    predictor="trainwire.tensorflow.predictor:TensorflowPredictor",
    backend="trainwire_worker.backends.tensorflow:TensorflowBackend",
    model_file="model.keras",
    platform="tensorflow",
)
