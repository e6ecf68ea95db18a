"""RLlib: one worker runs the algorithm; the coordinator checks the algorithm and environment by name."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os

from trainwire.rllib.framework import FRAMEWORK
from trainwire_coordinator.backends.base import CoordinatorBackend
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2


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


class RLBackend(CoordinatorBackend):
    name = FRAMEWORK.name
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
