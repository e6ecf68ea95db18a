"""RLlib: an algorithm by name on a gymnasium environment, trained on one worker.

As Ray's old ``RLTrainer``: no user code, the request names the algorithm
("PPO"), the environment ("CartPole-v1") and AlgorithmConfig settings by
section ({"training": {"lr": 3e-4}, "env_runners": {...}}). Env runners and
the learner stay inside the worker process by default (no extra Ray actors,
which would need CPUs outside the run's placement group).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import os
import tempfile
from numbers import Real
from typing import TYPE_CHECKING, Any

import trainwire.rllib  # noqa: F401 - keeps RLlib from switching TensorFlow to TF1 mode
from trainwire import train
from trainwire.checkpoint import METADATA_NAME, Checkpoint
from trainwire.dataset_schema import DatasetSchema
from trainwire.errors import InvalidArgumentError
from trainwire.rllib.framework import FRAMEWORK
from trainwire.structs import struct_to_dict
from trainwire.v1 import coordinator_pb2
from trainwire_worker.backends.base import Backend

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


@functools.lru_cache(maxsize=1)
def known_algorithms() -> tuple[str, ...] | None:
    """Names in RLlib's algorithm registry, read from its source (None: RLlib is not installed here).

    Importing ``ray.rllib`` costs seconds and pulls in torch, so the
    coordinator reads the registry's ``ALGORITHMS`` keys without importing it.
    """
    try:
        spec = importlib.util.find_spec("ray.rllib")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "algorithms", "registry.py")
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "ALGORITHMS" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return tuple(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return None


def _check_env(env: str) -> None:
    """Raises unless ``env`` is a registered gymnasium id (``module:Id`` ids need their module)."""
    if not env:
        raise InvalidArgumentError("rl.env is required (a gymnasium environment id)", field="rl.env")
    try:
        import gymnasium
    except ImportError:  # the workers check it
        return
    module, sep, env_id = env.rpartition(":")
    if sep:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise InvalidArgumentError(f"rl.env {env!r}: module {module!r} is not installed", field="rl.env")
        return  # the module registers its environments when imported (on the worker)
    if env_id not in gymnasium.envs.registry:
        raise InvalidArgumentError(f"rl.env {env!r} is not a registered gymnasium environment", field="rl.env")


def build_config(spec: coordinator_pb2.RLSpec) -> Any:
    """The AlgorithmConfig the spec describes: sections applied over in-process env runners."""
    from ray.rllib.algorithms.registry import ALGORITHMS

    if spec.algorithm not in ALGORITHMS:
        raise InvalidArgumentError(f"unknown RLlib algorithm {spec.algorithm!r}", field="rl.algorithm")
    # Only this algorithm's module is imported (not all of RLlib's registry).
    _, config = ALGORITHMS[spec.algorithm]()
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
    for module_id, module_metrics in (result.get("learners") or {}).items():
        if isinstance(module_metrics, dict):
            for key, value in module_metrics.items():
                candidates[f"learners/{module_id}/{key}"] = value
    for key, value in candidates.items():
        if (number := scalar(value)) is not None:
            metrics[key] = number
    return metrics


def train_rl(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
    spec = request.rl
    algo = build_config(spec).build_algo()
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
                meta = {"framework": "rllib", "algorithm": spec.algorithm, "env": spec.env}
                with open(os.path.join(tmp, METADATA_NAME), "w") as f:
                    json.dump(meta, f)
                train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
    finally:
        algo.stop()


class RLBackend(Backend):
    name = FRAMEWORK.name
    module = "ray.rllib"
    package = "ray[rllib]"
    spec_field = "rl"
    uses_ray_data = False
    # RLlib keeps global state (registries, torch threads) in the process.
    reuse_workers = False

    def validate(self, request: coordinator_pb2.FitRequest, datasets: dict[str, DatasetSchema]) -> None:
        super().validate(request, datasets)
        spec = request.rl
        if request.scaling_config.num_workers > 1:
            raise InvalidArgumentError(
                "RLTrainer trains on one worker (env runners and learner in its process); "
                "set scaling_config.num_workers=1",
                field="scaling_config.num_workers",
            )
        if not spec.algorithm:
            raise InvalidArgumentError("rl.algorithm is required (e.g. 'PPO')", field="rl.algorithm")
        known = known_algorithms()
        if known is not None and spec.algorithm not in known:
            raise InvalidArgumentError(
                f"unknown RLlib algorithm {spec.algorithm!r}; known: {', '.join(sorted(known))}",
                field="rl.algorithm",
            )
        _check_env(spec.env)
        if spec.num_iterations < 1:
            raise InvalidArgumentError(
                f"rl.num_iterations must be >= 1, got {spec.num_iterations}", field="rl.num_iterations"
            )
        for section, settings in struct_to_dict(spec.config).items():
            if not isinstance(settings, dict):
                raise InvalidArgumentError(
                    f"rl.config.{section} must be a mapping of AlgorithmConfig.{section}() arguments",
                    field=f"rl.config.{section}",
                )

    train = staticmethod(train_rl)
