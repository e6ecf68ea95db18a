"""Horovod as every trainwire component sees it (see ``trainwire.frameworks``).

Its checkpoints are torch checkpoints, served by the torch predictor.
"""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="horovod",
    trainer="trainwire.horovod.trainer:HorovodTrainer",
    checkpoint="trainwire.horovod.trainer:HorovodCheckpoint",
    predictor="trainwire.horovod.trainer:HorovodPredictor",
    backend="trainwire_worker.backends.horovod:HorovodBackend",
    model_file="model.pt",
    platform="pytorch",
)
