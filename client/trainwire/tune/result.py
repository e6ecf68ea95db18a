"""``ray.tune.result``: the names of Tune's auto-filled result keys, with Ray's values.

A trial's result carries these keys as in Ray (``training_iteration``, ``time_total_s``, ...).
``SHOULD_CHECKPOINT`` in a ``Trainable.step()`` result asks for a checkpoint after that step. A
``tune.Callback`` runs in this program from the search's event stream, after the result was
reported: setting the key there changes nothing on the trial (in Ray it asks for a checkpoint).
"""

from trainwire.air.constants import (
    EXPR_ERROR_FILE,
    EXPR_ERROR_PICKLE_FILE,
    EXPR_PARAM_FILE,
    EXPR_PARAM_PICKLE_FILE,
    EXPR_PROGRESS_FILE,
    EXPR_RESULT_FILE,
    TIME_THIS_ITER_S,
    TIMESTAMP,
    TRAINING_ITERATION,
)

DONE = "done"
SHOULD_CHECKPOINT = "should_checkpoint"
HOSTNAME = "hostname"
TRIAL_ID = "trial_id"
EXPERIMENT_TAG = "experiment_tag"
NODE_IP = "node_ip"
PID = "pid"
DEFAULT_METRIC = "_metric"
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
MEAN_ACCURACY = "mean_accuracy"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
TIME_TOTAL_S = "time_total_s"
DEFAULT_EXPERIMENT_INFO_KEYS = ("trainable_name", EXPERIMENT_TAG, TRIAL_ID)
DEFAULT_RESULT_KEYS = (TRAINING_ITERATION, TIME_TOTAL_S, MEAN_ACCURACY, MEAN_LOSS)
DEBUG_METRICS = (TRIAL_ID, "experiment_id", "date", TIMESTAMP, PID, HOSTNAME, NODE_IP, "config")
AUTO_RESULT_KEYS = (
    TRAINING_ITERATION,
    TIME_TOTAL_S,
    EPISODES_TOTAL,
    TIMESTEPS_TOTAL,
    NODE_IP,
    HOSTNAME,
    PID,
    TIME_TOTAL_S,
    TIME_THIS_ITER_S,
    TIMESTAMP,
    "date",
    "time_since_restore",
    "timesteps_since_restore",
    "iterations_since_restore",
    "config",
    "checkpoint_dir_name",
)
RESULT_DUPLICATE = "__duplicate__"
TRIAL_INFO = "__trial_info__"
STDOUT_FILE = "__stdout_file__"
STDERR_FILE = "__stderr_file__"
DEFAULT_EXPERIMENT_NAME = "default"
JOB_META_FILE = "job_status.json"
EXPR_META_FILE = "trial_status.json"
CONFIG_PREFIX = "config"

__all__ = [
    "AUTO_RESULT_KEYS",
    "CONFIG_PREFIX",
    "DEBUG_METRICS",
    "DEFAULT_EXPERIMENT_INFO_KEYS",
    "DEFAULT_EXPERIMENT_NAME",
    "DEFAULT_METRIC",
    "DEFAULT_RESULT_KEYS",
    "DONE",
    "EPISODES_THIS_ITER",
    "EPISODES_TOTAL",
    "EPISODE_REWARD_MEAN",
    "EXPERIMENT_TAG",
    "EXPR_ERROR_FILE",
    "EXPR_ERROR_PICKLE_FILE",
    "EXPR_META_FILE",
    "EXPR_PARAM_FILE",
    "EXPR_PARAM_PICKLE_FILE",
    "EXPR_PROGRESS_FILE",
    "EXPR_RESULT_FILE",
    "HOSTNAME",
    "JOB_META_FILE",
    "MEAN_ACCURACY",
    "MEAN_LOSS",
    "NODE_IP",
    "PID",
    "RESULT_DUPLICATE",
    "SHOULD_CHECKPOINT",
    "STDERR_FILE",
    "STDOUT_FILE",
    "TIMESTAMP",
    "TIMESTEPS_THIS_ITER",
    "TIMESTEPS_TOTAL",
    "TIME_THIS_ITER_S",
    "TIME_TOTAL_S",
    "TRAINING_ITERATION",
    "TRIAL_ID",
    "TRIAL_INFO",
]
