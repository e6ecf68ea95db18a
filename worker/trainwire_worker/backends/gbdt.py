"""Shared parts of the declarative gradient-boosting backends."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.errors import InvalidArgumentError
from trainwire.v1 import coordinator_pb2
from trainwire_worker.backends.base import Backend, DatasetSchema


class GBDTBackend(Backend):
    """Validation shared by XGBoost and LightGBM: params, label column, datasets."""

    spec_field = "gbdt"
    uses_ray_data = False

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        spec = request.gbdt
        if "train" not in datasets:
            raise InvalidArgumentError("datasets must include 'train'", field="datasets")
        if not spec.label_column:
            raise InvalidArgumentError("gbdt.label_column is required", field="gbdt.label_column")
        for name, schema in datasets.items():
            if spec.label_column not in schema.columns:
                raise InvalidArgumentError(
                    f"label column {spec.label_column!r} is not in dataset {name!r} "
                    f"(columns: {', '.join(schema.columns)})",
                    field="gbdt.label_column",
                )
        if spec.num_boost_round < 1:
            raise InvalidArgumentError(
                f"gbdt.num_boost_round must be >= 1, got {spec.num_boost_round}", field="gbdt.num_boost_round"
            )


def report_round(
    metrics: dict[str, Any],
    iteration: int,
    checkpoint_now: bool,
    save_model: Callable[[str], None],
) -> None:
    """Reports one boosting round; rank 0 writes the model when a checkpoint is due."""
    metrics = {**metrics, "training_iteration": iteration}
    if checkpoint_now and train.get_context().get_world_rank() == 0:
        with tempfile.TemporaryDirectory() as tmp:
            save_model(tmp)
            train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
    else:
        train.report(metrics)


def checkpoint_due(request: coordinator_pb2.FitRequest, iteration: int, last: bool) -> bool:
    cfg = request.run_config.checkpoint_config
    at_end = cfg.checkpoint_at_end if cfg.HasField("checkpoint_at_end") else True
    freq = cfg.checkpoint_frequency
    return (last and at_end) or (freq > 0 and iteration % freq == 0)
