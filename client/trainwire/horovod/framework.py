"""Horovod as every trainwire component sees it (see ``trainwire_core.frameworks``).

Its checkpoints are torch checkpoints, served by the torch predictor.
"""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="horovod",
    trainer="trainwire.horovod.trainer:HorovodTrainer",
    checkpoint="trainwire.horovod.checkpoint:HorovodCheckpoint",
    predictor="trainwire.horovod.predictor:HorovodPredictor",
    model_file="model.pt",
    platform="pytorch",
    detection_order=4,
    module="horovod",
    package="horovod",
    # PyPI's sdist does not build against torch 2.x unpatched.
    install="scripts/build_horovod.sh (run by make setup: Horovod 0.28.1 patched for torch 2.x)",
)
