"""RLlib: an algorithm by name on a gymnasium environment, trained on one worker.

As Ray's old ``RLTrainer``: no user code, the request names the algorithm
("PPO"), the environment ("CartPole-v1") and AlgorithmConfig settings, by
section ({"training": {"lr": 3e-4}, "env_runners": {...}}) or as Ray 2.x's flat
dict. This worker is the algorithm's process; remote env runners, evaluation
runners and learners land in the bundles the coordinator reserved after it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from numbers import Real
from typing import TYPE_CHECKING, Any

import trainwire.rllib  # noqa: F401 - keeps RLlib from switching TensorFlow to TF1 mode
from trainwire import train
from trainwire.checkpoint import METADATA_NAME, Checkpoint
from trainwire.rllib.settings import settings_of
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2
from trainwire_worker.actor import WorkerBackend

if TYPE_CHECKING:
    from trainwire_worker.actor import TrainWorker

# Summary metrics of result["env_runners"] reported at the top level.
_ENV_RUNNER_METRICS = (
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "num_episodes",
    "num_episodes_lifetime",
)
_TOP_LEVEL_METRICS = (
    "training_iteration",
    "num_env_steps_sampled_lifetime",
    "time_this_iter_s",
    "time_total_s",
)


def build_config(spec: coordinator_pb2.RLSpec) -> Any:
    """The AlgorithmConfig the spec describes: a flat config, or sections over in-process env runners."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    if spec.algorithm not in ALGORITHMS:
        raise InvalidArgumentError(f"unknown RLlib algorithm {spec.algorithm!r}", field="rl.algorithm")
    # Only this algorithm's module is imported (not all of RLlib's registry).
    _, config = ALGORITHMS[spec.algorithm]()
    if spec.HasField("flat_config"):
        try:
            return config.update_from_dict(settings_of(spec))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"rl.flat_config: {exc}", field="rl.flat_config") from exc
    config = config.environment(spec.env).env_runners(num_env_runners=0)
    for section, settings in struct_to_dict(spec.config).items():
        method = getattr(config, section, None)
        if not callable(method) or section.startswith("_"):
            raise InvalidArgumentError(
                f"rl.config: {section!r} is not an AlgorithmConfig section", field=f"rl.config.{section}"
            )
        try:
            config = method(**settings)
        except TypeError as exc:
            raise InvalidArgumentError(f"rl.config.{section}: {exc}", field=f"rl.config.{section}") from exc
    return config


def flatten_result(result: dict[str, Any]) -> dict[str, float]:
    """The useful scalars of ``algo.train()``'s result, flat and finite."""

    def scalar(value: Any) -> float | None:
        if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # numpy / torch scalars
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, Real):
            return None
        value = float(value)
        return value if math.isfinite(value) else None

    metrics: dict[str, float] = {}
    candidates: dict[str, Any] = {key: result.get(key) for key in _TOP_LEVEL_METRICS}
    env_runners = result.get("env_runners") or {}
    candidates.update({key: env_runners.get(key) for key in _ENV_RUNNER_METRICS})
    candidates["num_healthy_env_runners"] = (result.get("fault_tolerance") or {}).get("num_healthy_workers")
    evaluation = (result.get("evaluation") or {}).get("env_runners") or {}
    candidates.update({f"evaluation/{key}": evaluation.get(key) for key in _ENV_RUNNER_METRICS})
    for module_id, module_metrics in (result.get("learners") or {}).items():
        if isinstance(module_metrics, dict):
            for key, value in module_metrics.items():
                candidates[f"learners/{module_id}/{key}"] = value
    for key, value in candidates.items():
        if (number := scalar(value)) is not None:
            metrics[key] = number
    return metrics


def check_placement(config: Any) -> None:
    """Fails clearly when RLlib would ask for other bundles than the run reserved.

    RLlib puts each remote runner in the bundle its index names; a layout that
    differs would leave a runner waiting for resources nobody reserved.
    """
    import ray

    pg = ray.util.get_current_placement_group()
    wanted = [
        {k: float(v) for k, v in b.items() if v} for b in config.algo_class.default_resource_request(config).bundles
    ]
    if pg is None:
        if len(wanted) > 1:
            raise InvalidArgumentError(
                f"RLlib wants {len(wanted) - 1} remote actors but the run reserved no bundles for them",
                field="rl.config",
            )
        return
    # Bundle 0 is this worker's own (RLlib's main process); runners go by index into the rest.
    reserved = [{k: float(v) for k, v in b.items() if v} for b in pg.bundle_specs]
    if reserved[1:] != wanted[1:]:
        raise InvalidArgumentError(
            f"RLlib asks for runner bundles {wanted[1:]}, the run reserved {reserved[1:]}", field="rl.config"
        )


def train_rl(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    spec = request.rl
    config = build_config(spec)
    check_placement(config)
    algo = config.build_algo()
    try:
        if (checkpoint := train.get_checkpoint()) is not None:
            with checkpoint.as_directory() as d:
                algo.restore_from_path(d)
        cfg = request.run_config.checkpoint_config
        at_end = cfg.checkpoint_at_end if cfg.HasField("checkpoint_at_end") else True
        freq = cfg.checkpoint_frequency
        # A restored algorithm keeps its iteration count: a restarted run trains what is left.
        while algo.iteration < spec.num_iterations:
            metrics = flatten_result(algo.train())
            iteration = algo.iteration
            last = iteration >= spec.num_iterations
            metrics["training_iteration"] = float(iteration)
            if not ((last and at_end) or (freq > 0 and iteration % freq == 0)):
                train.report(metrics)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                algo.save_to_path(tmp)
                meta = {"framework": "rllib", "algorithm": spec.algorithm, "env": spec.env or str(config.env)}
                with open(os.path.join(tmp, METADATA_NAME), "w") as f:
                    json.dump(meta, f)
                train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
    finally:
        algo.stop()


class RLBackend(WorkerBackend):
    train = staticmethod(train_rl)
