"""XGBoost: distributed training through xgboost's own collective.

Rank 0 runs the tracker; every worker trains inside a CommunicatorContext on
its shard, so histograms and eval metrics are allreduced across workers. Both
forms of XGBoostTrainer run there: the declarative one's training function
below, and the user's ``train_loop_per_worker`` (as Ray's ``XGBoostConfig``
wraps it), whose ``xgboost.train`` call then trains with the other workers'.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from trainwire import train
from trainwire.xgboost.framework import FRAMEWORK
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2
from trainwire_worker.actor import WorkerBackend, run_train_loop
from trainwire_worker.backends import write_model_metadata
from trainwire_worker.backends.gbdt import checkpoint_due, report_round, resume_point

if TYPE_CHECKING:
    from trainwire_worker.actor import TrainWorker

MODEL_FILENAME = FRAMEWORK.model_file


def to_dmatrix(table: Any, label_column: str, dmatrix_params: dict[str, Any]) -> Any:
    import xgboost

    df = table.to_pandas()
    return xgboost.DMatrix(df.drop(columns=[label_column]), label=df[label_column], **dmatrix_params)


def collective(worker: TrainWorker) -> contextlib.AbstractContextManager[Any]:
    """XGBoost's collective for this worker, as the coordinator's half set it up (none for one worker)."""
    from xgboost.collective import CommunicatorContext

    args = worker.state.get("xgboost_args")
    if not args:
        return contextlib.nullcontext()
    return CommunicatorContext(dmlc_task_id=str(train.get_context().get_world_rank()), **args)


def train_xgboost(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    """Runs either form of XGBoostTrainer on this worker."""
    if request.WhichOneof("trainer") == "data_parallel":
        with collective(worker):
            run_train_loop(worker, request)
    else:
        train_declarative(worker, request)


def train_declarative(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    import xgboost

    spec = request.gbdt
    params = struct_to_dict(spec.params)
    dmatrix_params = struct_to_dict(spec.dmatrix_params)
    params.setdefault("nthread", int(os.environ.get("OMP_NUM_THREADS", "1")))
    shards = {name: train.get_dataset_shard(name) for name in request.datasets}
    train_table = shards.pop("train")
    features = [c for c in train_table.column_names if c != spec.label_column]
    dtrain = to_dmatrix(train_table, spec.label_column, dmatrix_params)
    evals = [(dtrain, "train")] + [(to_dmatrix(t, spec.label_column, dmatrix_params), n) for n, t in shards.items()]

    start_model, done, rounds = resume_point(
        request, MODEL_FILENAME, lambda path: xgboost.Booster(model_file=path), lambda m: m.num_boosted_rounds()
    )

    def save(model: Any, path: str) -> bytes:
        """Writes the model into ``path`` (if given); returns its bytes."""
        raw = bytes(model.save_raw(raw_format="ubj"))
        if path:
            with open(os.path.join(path, MODEL_FILENAME), "wb") as f:
                f.write(raw)
            write_model_metadata(path, "xgboost", features, spec.label_column)
        return raw

    class ReportCallback(xgboost.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: dict) -> bool:
            metrics = {f"{d}-{m}": values[-1] for d, by_metric in evals_log.items() for m, values in by_metric.items()}
            iteration = done + epoch + 1
            report_round(
                metrics,
                iteration,
                checkpoint_due(request, iteration, last=epoch + 1 == rounds),
                lambda path: save(model, path),
                train_table.num_rows,
            )
            return False

    with collective(worker):
        xgboost.train(
            params,
            dtrain,
            num_boost_round=rounds,
            evals=evals,
            xgb_model=start_model,
            callbacks=[ReportCallback()],
            verbose_eval=True,  # rank 0 prints each round, as Ray's XGBoostTrainer does
        )


class XGBoostBackend(WorkerBackend):
    train = staticmethod(train_xgboost)
