"""RLlib as every trainwire component sees it (see ``trainwire_core.frameworks``).

Its checkpoints are RLlib checkpoint folders, recognised by their manifest.
"""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="rllib",
    trainer="trainwire.rllib.trainer:RLTrainer",
    checkpoint="trainwire.rllib.checkpoint:RLCheckpoint",
    predictor="trainwire.rllib.predictor:RLPredictor",
    platform="rllib",
    detection_order=8,
    module="ray.rllib",
    package="ray[rllib]",
)
