"""Torch as every trainwire component sees it (see ``trainwire_core.frameworks``)."""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="torch",
    trainer="trainwire.torch.trainer:TorchTrainer",
    checkpoint="trainwire.torch.checkpoint:TorchCheckpoint",
    predictor="trainwire.torch.predictor:TorchPredictor",
    model_file="model.pt",
    platform="pytorch",
    detection_order=3,
    module="torch",
    package="torch",
)
