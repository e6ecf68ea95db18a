"""A bare ``DataParallelTrainer`` as every trainwire component sees it (see ``trainwire_core.frameworks``).

Its loop runs on every worker with no framework set up; its checkpoints hold whatever the
loop wrote, so the predictor serves them only by the model file they hold (a torch
``model.pt``, ...), and no platform of its own.
"""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="data_parallel",
    trainer="trainwire.trainer:DataParallelTrainer",
    checkpoint="trainwire.checkpoint:Checkpoint",
    predictor="trainwire.predictor:Predictor",
    platform="",
    detection_order=100,
    # What ships the loop; the loop imports the rest itself.
    module="cloudpickle",
    package="cloudpickle",
)
