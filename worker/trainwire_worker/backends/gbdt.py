"""What the XGBoost and LightGBM training functions share: resuming, and reporting a round."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire_core.v1 import coordinator_pb2


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


def resume_point(
    request: coordinator_pb2.FitRequest, model_file: str, load: Callable[[str], Any], rounds_done: Callable[[Any], int]
) -> tuple[Any, int, int]:
    """Where a boosting run starts: (model of the latest checkpoint or None, rounds done, rounds left).

    Args:
        request: The run's request (its ``gbdt.num_boost_round`` is the total).
        model_file: The model's file name in a checkpoint.
        load: Loads a booster from a path.
        rounds_done: The rounds a loaded booster holds.
    """
    start_model = None
    if (checkpoint := train.get_checkpoint()) is not None:
        with checkpoint.as_directory() as d:
            start_model = load(os.path.join(d, model_file))
    done = rounds_done(start_model) if start_model is not None else 0
    return start_model, done, max(request.gbdt.num_boost_round - done, 0)
