"""HuggingFace Transformers as every trainwire component sees it (see ``trainwire_core.frameworks``).

Runs on the torch backend; checkpoints hold ``save_pretrained`` output in ``checkpoint/``.
"""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="huggingface",
    trainer="trainwire.huggingface.trainer:HuggingFaceTrainer",
    checkpoint="trainwire.huggingface.checkpoint:HuggingFaceCheckpoint",
    predictor="trainwire.huggingface.predictor:HuggingFacePredictor",
    model_file="checkpoint/config.json",
    platform="huggingface",
    detection_order=5,
    module="transformers",
    package="transformers",
    install="pip install transformers accelerate",
)
