"""Shared parts of the declarative gradient-boosting backends."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.dataset_schema import DatasetSchema
from trainwire.errors import InvalidArgumentError
from trainwire.v1 import coordinator_pb2
from trainwire_worker.backends.base import Backend, check_tabular_datasets


class GBDTBackend(Backend):
    """Validation shared by XGBoost and LightGBM: params, label column, datasets."""

    spec_field = "gbdt"
    uses_ray_data = False
    reuse_workers = True

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        spec = request.gbdt
        check_tabular_datasets(datasets, spec.label_column, "gbdt.label_column")
        if spec.num_boost_round < 1:
            raise InvalidArgumentError(
                f"gbdt.num_boost_round must be >= 1, got {spec.num_boost_round}", field="gbdt.num_boost_round"
            )


def report_round(
    metrics: dict[str, Any],
    iteration: int,
    checkpoint_now: bool,
    save_model: Callable[[str], bytes],
    num_rows: int,
) -> None:
    """Reports one boosting round.

    When a checkpoint is due, rank 0 writes the model and every rank adds a
    ``worker_<rank>.json`` summary (rows trained on, hash of its model), so a
    checkpoint shows that all workers ended with the same model.
    """
    metrics = {**metrics, "training_iteration": iteration}
    if not checkpoint_now:
        train.report(metrics)
        return
    ctx = train.get_context()
    with tempfile.TemporaryDirectory() as tmp:
        raw = save_model(tmp if ctx.get_world_rank() == 0 else "")
        summary = {
            "world_rank": ctx.get_world_rank(),
            "world_size": ctx.get_world_size(),
            "num_rows": num_rows,
            "pid": os.getpid(),
            "model_sha256": hashlib.sha256(raw).hexdigest(),
        }
        with open(os.path.join(tmp, f"worker_{ctx.get_world_rank()}.json"), "w") as f:
            json.dump(summary, f)
        train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))


def checkpoint_due(request: coordinator_pb2.FitRequest, iteration: int, last: bool) -> bool:
    cfg = request.run_config.checkpoint_config
    at_end = cfg.checkpoint_at_end if cfg.HasField("checkpoint_at_end") else True
    freq = cfg.checkpoint_frequency
    return (last and at_end) or (freq > 0 and iteration % freq == 0)
