"""LightGBM: data-parallel training over LightGBM's own socket network.

Every worker listens on a port of its own; with ``tree_learner=data`` the
workers build each tree together, each from its shard of the rows. The
declarative LightGBMTrainer's training function is below; a user's
``train_loop_per_worker`` runs with the same network in
``trainwire.lightgbm.get_network_params()``, as Ray's ``LightGBMConfig`` sets it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from trainwire import train
from trainwire.lightgbm.framework import FRAMEWORK
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2
from trainwire_worker.actor import WorkerBackend, run_train_loop
from trainwire_worker.backends import write_model_metadata
from trainwire_worker.backends.gbdt import checkpoint_due, report_round, resume_point

if TYPE_CHECKING:
    from trainwire_worker.actor import TrainWorker

MODEL_FILENAME = FRAMEWORK.model_file


def to_dataset(table: Any, label_column: str, dataset_params: dict[str, Any], reference: Any = None) -> Any:
    import lightgbm

    df = table.to_pandas()
    return lightgbm.Dataset(
        df.drop(columns=[label_column]), label=df[label_column], reference=reference, **dataset_params
    )


# What ``get_network_params()`` returns, as Ray's: the caller adds ``tree_learner`` and ``pre_partition``.
NETWORK_PARAMS = ("num_machines", "machines", "local_listen_port")


def train_lightgbm(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    """Runs either form of LightGBMTrainer on this worker."""
    if request.WhichOneof("trainer") != "data_parallel":
        train_declarative(worker, request)
        return
    from trainwire.lightgbm.config import _set_network_params

    network = worker.state.get("lightgbm_network", {})
    _set_network_params({key: network[key] for key in NETWORK_PARAMS if key in network})
    try:
        run_train_loop(worker, request)
    finally:
        _set_network_params(None)


def train_declarative(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    import lightgbm

    spec = request.gbdt
    params = {"verbose": -1, **struct_to_dict(spec.params)}
    params.setdefault("num_threads", int(os.environ.get("OMP_NUM_THREADS", "1")))
    params.update(worker.state.get("lightgbm_network", {}))
    dataset_params = struct_to_dict(spec.dmatrix_params)
    shards = {name: train.get_dataset_shard(name) for name in request.datasets}
    train_table = shards.pop("train")
    features = [c for c in train_table.column_names if c != spec.label_column]
    dtrain = to_dataset(train_table, spec.label_column, dataset_params)
    valid_sets, valid_names = [dtrain], ["train"]
    for name, table in shards.items():
        valid_sets.append(to_dataset(table, spec.label_column, dataset_params, reference=dtrain))
        valid_names.append(name)

    start_model, done, rounds = resume_point(
        request, MODEL_FILENAME, lambda path: lightgbm.Booster(model_file=path), lambda m: m.current_iteration()
    )

    def save(model: Any, path: str) -> bytes:
        """Writes the model into ``path`` (if given); returns its trees, serialised.

        The model file also holds each worker's own parameters (its listen
        port) and feature ranges of its shard; the trees are what must agree.
        """
        if path:
            model.save_model(os.path.join(path, MODEL_FILENAME))
            write_model_metadata(path, "lightgbm", features, spec.label_column)
        return json.dumps(model.dump_model()["tree_info"], sort_keys=True).encode()

    def report_callback(env: Any) -> None:
        metrics = {f"{data}-{metric}": value for data, metric, value, _ in env.evaluation_result_list}
        iteration = env.iteration + 1
        report_round(
            metrics,
            iteration,
            checkpoint_due(request, iteration, last=iteration == env.end_iteration),
            lambda path: save(env.model, path),
            train_table.num_rows,
        )

    lightgbm.train(
        params,
        dtrain,
        num_boost_round=rounds,
        valid_sets=valid_sets,
        valid_names=valid_names,
        init_model=start_model,
        callbacks=[report_callback],
    )


class LightGBMBackend(WorkerBackend):
    train = staticmethod(train_lightgbm)
