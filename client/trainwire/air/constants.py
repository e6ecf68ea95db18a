"""``ray.air.constants``: the keys Ray 2.4's dict checkpoints and trainers use, meaning what they mean in trainwire."""

from trainwire.checkpoint import PREPROCESSOR_KEY

# PREPROCESSOR_KEY names the preprocessor in a trainwire checkpoint: its file, so Ray 2.4's
# ``os.path.join(checkpoint_dir, PREPROCESSOR_KEY)`` opens the file that exists ("preprocessor.pkl",
# not Ray's "_preprocessor"), and its key in ``Checkpoint.to_dict()`` / ``from_dict()``.

# The model's entry in a dict checkpoint, e.g. ``Checkpoint.from_dict({MODEL_KEY: model.state_dict()})``;
# TorchPredictor and TensorflowPredictor load it from there.
MODEL_KEY = "model"
# The dataset a trainer fits the preprocessor on and trains with.
TRAIN_DATASET_KEY = "train"
# The dataset GBDT trainers evaluate on when they take only one.
EVALUATION_DATASET_KEY = "evaluation"

__all__ = ["EVALUATION_DATASET_KEY", "MODEL_KEY", "PREPROCESSOR_KEY", "TRAIN_DATASET_KEY"]
