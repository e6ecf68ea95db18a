"""RLlib: one worker runs the algorithm; the coordinator checks it by name and reserves its runners' bundles.

The worker is the algorithm's own process (bundle 0, as in RLlib's resource request);
remote env runners, evaluation runners and learners get the bundles after it, in the
order RLlib places them inside a placement group.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os

from trainwire.rllib.framework import FRAMEWORK
from trainwire.rllib.settings import placement_bundles, settings_of
from trainwire_coordinator.backends.base import CoordinatorBackend
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2


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
                "RLTrainer's one worker is the algorithm's process; remote env runners are "
                "rl.config.env_runners.num_env_runners (or rl.flat_config's num_workers)",
                field="scaling_config.num_workers",
            )
        if spec.HasField("flat_config") and struct_to_dict(spec.config):
            raise InvalidArgumentError("give rl.config or rl.flat_config, not both", field="rl.flat_config")
        if not spec.algorithm:
            raise InvalidArgumentError("rl.algorithm is required (e.g. 'PPO')", field="rl.algorithm")
        known = known_algorithms()
        if known is not None and spec.algorithm not in known:
            raise InvalidArgumentError(
                f"unknown RLlib algorithm {spec.algorithm!r}; known: {', '.join(sorted(known))}",
                field="rl.algorithm",
            )
        flat_env = struct_to_dict(spec.flat_config).get("env") if spec.HasField("flat_config") else None
        if flat_env is not None and not isinstance(flat_env, str):
            raise InvalidArgumentError(
                "rl.flat_config.env must be a gymnasium environment id", field="rl.flat_config.env"
            )
        _check_env(spec.env or flat_env or "")
        # Before the placement is computed from them: a section that is not a mapping has no arguments to merge.
        for section, settings in struct_to_dict(spec.config).items():
            if not isinstance(settings, dict):
                raise InvalidArgumentError(
                    f"rl.config.{section} must be a mapping of AlgorithmConfig.{section}() arguments",
                    field=f"rl.config.{section}",
                )
        try:
            placement_bundles(settings_of(spec))
        except ValueError as exc:
            field = "rl.flat_config" if spec.HasField("flat_config") else "rl.config"
            raise InvalidArgumentError(f"{field}: {exc}", field=field) from exc
        if spec.num_iterations < 1:
            raise InvalidArgumentError(
                f"rl.num_iterations must be >= 1, got {spec.num_iterations}", field="rl.num_iterations"
            )

    def placement_scaling(self, request: coordinator_pb2.FitRequest) -> common_pb2.ScalingConfig:
        """One worker, the algorithm's process, with the first bundle of RLlib's resource request."""
        placed = common_pb2.ScalingConfig()
        placed.CopyFrom(request.scaling_config)
        if request.rl.HasField("flat_config"):
            placed.resources_per_worker.clear()
            placed.resources_per_worker.update(placement_bundles(settings_of(request.rl))[0])
            placed.trainer_resources.clear()
        return placed

    def side_bundles(self, request: coordinator_pb2.FitRequest) -> list[dict[str, float]]:
        """The remote env runners', evaluation runners' and learners' bundles, in RLlib's order."""
        return placement_bundles(settings_of(request.rl))[1:]
