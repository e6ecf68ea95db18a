"""scikit-learn: one estimator on one worker; joblib parallelism inside it."""

from __future__ import annotations

import importlib
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

import cloudpickle

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.sklearn.framework import FRAMEWORK
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2
from trainwire_worker.actor import WorkerBackend
from trainwire_worker.backends import write_model_metadata

if TYPE_CHECKING:
    from trainwire_worker.actor import TrainWorker

MODEL_FILENAME = FRAMEWORK.model_file


def build_estimator(spec: coordinator_pb2.SklearnSpec) -> Any:
    if spec.WhichOneof("estimator") == "pickled_estimator":
        return cloudpickle.loads(spec.pickled_estimator)
    module, _, name = spec.estimator_class.replace(":", ".").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"cannot import estimator class {spec.estimator_class!r}: {exc}", field="sklearn.estimator_class"
        ) from exc
    return cls(**struct_to_dict(spec.estimator_params))


def train_sklearn(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    from sklearn.model_selection import cross_validate

    spec = request.sklearn
    estimator = build_estimator(spec)
    frames = {name: train.get_dataset_shard(name).to_pandas() for name in request.datasets}
    train_df = frames.pop("train")
    X, y = train_df.drop(columns=[spec.label_column]), train_df[spec.label_column]
    metrics: dict[str, Any] = {}
    if spec.cv > 1:
        # One scorer keeps sklearn's plain "test_score" key, as Ray's SklearnTrainer reports.
        scoring = spec.scoring[0] if len(spec.scoring) == 1 else (list(spec.scoring) or None)
        n_jobs = spec.parallelize_cv or int(os.environ.get("OMP_NUM_THREADS", "1"))
        cv = cross_validate(
            estimator,
            X,
            y,
            cv=spec.cv,
            scoring=scoring,
            return_train_score=spec.return_train_score_cv,
            n_jobs=n_jobs,
        )
        for key, values in cv.items():
            metrics[f"cv/{key}"] = [float(v) for v in values]
            metrics[f"cv/{key}_mean"] = float(values.mean())
    start = time.monotonic()
    estimator.fit(X, y)
    metrics["fit_time"] = time.monotonic() - start
    for name, df in frames.items():
        metrics[f"{name}/score"] = float(estimator.score(df.drop(columns=[spec.label_column]), df[spec.label_column]))
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, MODEL_FILENAME), "wb") as f:
            cloudpickle.dump(estimator, f)
        write_model_metadata(tmp, "sklearn", list(X.columns), spec.label_column)
        train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


class SklearnBackend(WorkerBackend):
    train = staticmethod(train_sklearn)
