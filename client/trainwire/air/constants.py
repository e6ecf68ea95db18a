"""``ray.air.constants``: the keys Ray 2.4's dict checkpoints and trainers use."""

from trainwire.checkpoint import PREPROCESSOR_KEY

# The model's entry in a dict checkpoint, e.g. ``Checkpoint.from_dict({MODEL_KEY: model.state_dict()})``;
# TorchPredictor and TensorflowPredictor load it from there.
MODEL_KEY = "model"
# The dataset a trainer fits the preprocessor on and trains with.
TRAIN_DATASET_KEY = "train"
# The dataset GBDT trainers evaluate on when they take only one.
EVALUATION_DATASET_KEY = "evaluation"

__all__ = ["EVALUATION_DATASET_KEY", "MODEL_KEY", "PREPROCESSOR_KEY", "TRAIN_DATASET_KEY"]
