"""LightGBM: data-parallel training over LightGBM's own socket network.

Every worker listens on a port of its own; with ``tree_learner=data`` the
workers build each tree together, each from its shard of the rows.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from trainwire import train
from trainwire.lightgbm.framework import FRAMEWORK
from trainwire.structs import struct_to_dict
from trainwire.v1 import coordinator_pb2
from trainwire_worker.backends.base import write_model_metadata
from trainwire_worker.backends.gbdt import GBDTBackend, checkpoint_due, report_round

if TYPE_CHECKING:
    from trainwire_worker.actor import TrainWorker
    from trainwire_worker.backends.base import WorkerGroup

MODEL_FILENAME = FRAMEWORK.model_file


def _set_network(worker: TrainWorker, network: dict[str, Any]) -> None:
    worker.state["lightgbm_network"] = network


def to_dataset(table: Any, label_column: str, dataset_params: dict[str, Any], reference: Any = None) -> Any:
    import lightgbm

    df = table.to_pandas()
    return lightgbm.Dataset(
        df.drop(columns=[label_column]), label=df[label_column], reference=reference, **dataset_params
    )


def train_lightgbm(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
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

    start_model = None
    if (checkpoint := train.get_checkpoint()) is not None:
        with checkpoint.as_directory() as d:
            start_model = lightgbm.Booster(model_file=os.path.join(d, MODEL_FILENAME))
    done = start_model.current_iteration() if start_model is not None else 0
    rounds = max(spec.num_boost_round - done, 0)

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


class LightGBMBackend(GBDTBackend):
    name = FRAMEWORK.name
    module = "lightgbm"
    package = "lightgbm"

    async def on_training_start(self, group: WorkerGroup, request: coordinator_pb2.FitRequest) -> None:
        if len(group) == 1:
            await group.execute(_set_network, {})
            return
        ports = await group.execute(lambda w: w.free_port())
        machines = ",".join(f"{m.node_ip}:{port}" for m, port in zip(group.metas, ports))
        await group.execute_each(
            _set_network,
            [
                (
                    {
                        "tree_learner": "data",
                        "num_machines": len(group),
                        "machines": machines,
                        "local_listen_port": port,
                        # All rows of a worker are its own: no need to re-partition.
                        "pre_partition": True,
                        "time_out": 2,
                    },
                )
                for port in ports
            ],
        )

    train = staticmethod(train_lightgbm)
