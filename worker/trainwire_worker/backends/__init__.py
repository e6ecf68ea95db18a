"""The training functions of the declarative trainers (XGBoost, LightGBM, scikit-learn, RLlib).

Each is a ``trainwire_worker.actor.WorkerBackend`` registered in the ``trainwire.worker_backends``
entry-point group; every other framework runs the user's loop (the actor's ``DataParallelBackend``).
"""

from __future__ import annotations

import json
import os

from trainwire.checkpoint import METADATA_NAME


def write_model_metadata(directory: str, framework: str, feature_columns: list[str], label_column: str) -> None:
    """Records what the model takes, so predictors can describe and check inputs."""
    meta = {"framework": framework, "feature_columns": feature_columns, "label_column": label_column}
    with open(os.path.join(directory, METADATA_NAME), "w") as f:
        json.dump(meta, f)
