"""RLlib as every trainwire component sees it (see ``trainwire.frameworks``).

Its checkpoints are RLlib checkpoint folders, recognised by their manifest.
"""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="rllib",
    trainer="trainwire.rllib.trainer:RLTrainer",
    checkpoint="trainwire.rllib.trainer:RLCheckpoint",
    predictor="trainwire.rllib.predictor:RLPredictor",
    backend="trainwire_worker.backends.rl:RLBackend",
    platform="rllib",
)
