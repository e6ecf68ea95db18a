"""HuggingFace Transformers as every trainwire component sees it (see ``trainwire.frameworks``).

Runs on the torch backend; checkpoints hold ``save_pretrained`` output in ``checkpoint/``.
"""

from trainwire.frameworks import Framework

FRAMEWORK = Framework(
    name="huggingface",
    trainer="trainwire.huggingface.trainer:HuggingFaceTrainer",
    checkpoint="trainwire.huggingface.checkpoint:HuggingFaceCheckpoint",
    predictor="trainwire.huggingface.predictor:HuggingFacePredictor",
    backend="trainwire_worker.backends.huggingface:HuggingFaceBackend",
    model_file="checkpoint/config.json",
    platform="huggingface",
)
