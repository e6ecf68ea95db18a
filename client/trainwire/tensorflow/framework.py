"""TensorFlow as every trainwire component sees it (see ``trainwire_core.frameworks``)."""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="tensorflow",
    trainer="trainwire.tensorflow.trainer:TensorflowTrainer",
    checkpoint="trainwire.tensorflow.checkpoint:TensorflowCheckpoint",
    predictor="trainwire.tensorflow.predictor:TensorflowPredictor",
    model_file="model.keras",
    platform="tensorflow",
    detection_order=6,
    # tf-keras requires the "tensorflow" distribution (not tensorflow-cpu, whose files would clash).
    module="tensorflow",
    package="tensorflow tf-keras",
)
