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

# Auto-filled result keys and a trial's file names, Ray's values (``ray.tune.result`` re-exports them).
TIMESTAMP = "timestamp"
TIME_THIS_ITER_S = "time_this_iter_s"
TRAINING_ITERATION = "training_iteration"
EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"
EXPR_PROGRESS_FILE = "progress.csv"
EXPR_RESULT_FILE = "result.json"
EXPR_ERROR_PICKLE_FILE = "error.pkl"
EXPR_ERROR_FILE = "error.txt"

__all__ = [
    "EVALUATION_DATASET_KEY",
    "EXPR_ERROR_FILE",
    "EXPR_ERROR_PICKLE_FILE",
    "EXPR_PARAM_FILE",
    "EXPR_PARAM_PICKLE_FILE",
    "EXPR_PROGRESS_FILE",
    "EXPR_RESULT_FILE",
    "MODEL_KEY",
    "PREPROCESSOR_KEY",
    "TIMESTAMP",
    "TIME_THIS_ITER_S",
    "TRAINING_ITERATION",
    "TRAIN_DATASET_KEY",
]
