"""Torch as every trainwire component sees it (see ``trainwire.frameworks``)."""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="torch",
    trainer="trainwire.torch.trainer:TorchTrainer",
    checkpoint="trainwire.torch.checkpoint:TorchCheckpoint",
    predictor="trainwire.torch.predictor:TorchPredictor",
    backend="trainwire_worker.backends.torch:TorchBackend",
    model_file="model.pt",
    platform="pytorch",
)
