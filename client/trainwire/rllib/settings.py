"""An RLTrainer's RLlib settings and the placement they need, shared by the SDK, coordinator and worker.

Two forms of ``config`` reach the coordinator:

- by section (``{"training": {...}, "env_runners": {...}}``), each passed to that
  ``AlgorithmConfig`` method; env runners stay in the worker unless a section says otherwise;
- flat, as Ray 2.x's ``RLTrainer`` took it (``{"env": "CartPole-v1", "num_workers": 2,
  "evaluation_num_workers": 1, ...}``), applied with ``AlgorithmConfig.update_from_dict``
  after Ray 2.4's names are renamed to today's. ``ScalingConfig`` then means what Ray 2.4's
  RLTrainer made of it: ``num_workers`` remote env runners, ``resources_per_worker`` each,
  ``trainer_resources`` for the algorithm's own process (its local learner included).

Nothing here imports RLlib: the coordinator reserves the run's placement group from
these settings, with bundles in the order RLlib's ``default_resource_request`` lays out
(the algorithm, then env runners, then evaluation runners, then learners), which is
where RLlib puts each remote actor it starts inside a placement group.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from trainwire.config import MAX_WORKERS, ScalingConfig
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2

# AlgorithmConfig's section methods, whose keyword arguments a sectioned config gives.
SECTIONS = frozenset(
    {
        "api_stack",
        "callbacks",
        "checkpointing",
        "debugging",
        "env_runners",
        "environment",
        "evaluation",
        "experimental",
        "fault_tolerance",
        "framework",
        "learners",
        "multi_agent",
        "offline_data",
        "python_environment",
        "reporting",
        "resources",
        "rl_module",
        "training",
    }
)

# Ray 2.4's flat names that RLlib 2.x renamed (update_from_dict would set them as unused attributes).
RENAMED = {
    "num_rollout_workers": "num_env_runners",
    "num_workers": "num_env_runners",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "custom_resources_per_worker": "custom_resources_per_env_runner",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "num_cpus_for_driver": "num_cpus_for_main_process",
    "sgd_minibatch_size": "minibatch_size",
    "num_sgd_iter": "num_epochs",
}


def is_sectioned(config: dict[str, Any]) -> bool:
    """True when every key names an AlgorithmConfig section (a flat config names its ``env``)."""
    return bool(config) and "env" not in config and all(key in SECTIONS for key in config)


def translate_flat(config: dict[str, Any]) -> dict[str, Any]:
    """Ray 2.4's flat config in RLlib 2.x's names; TensorFlow becomes torch (RLlib 2.x has no TF stack)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        key = RENAMED.get(key, key)
        if key == "framework" and value in ("tf", "tf2", "tfe"):
            warnings.warn(
                f'RLlib 2.x trains with torch only: "framework": {value!r} runs as "torch"',
                DeprecationWarning,
                stacklevel=3,
            )
            value = "torch"
        elif key == "evaluation_config" and isinstance(value, dict):
            value = translate_flat(value)
        out[key] = value
    return out


def _number(settings: dict[str, Any], key: str, default: float) -> float:
    """A resource amount: a finite number >= 0 (RLlib's "auto" and absent keys take ``default``)."""
    value = settings.get(key, default)
    if value is None or value == "auto":
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"{key} must be a number >= 0, got {value!r}")
    return float(value)


def _count(settings: dict[str, Any], key: str) -> int:
    """How many actors of a kind: a whole number up to MAX_WORKERS."""
    value = _number(settings, key, 0)
    if value != int(value) or value > MAX_WORKERS:
        raise ValueError(f"{key} must be a whole number from 0 to {MAX_WORKERS}, got {value:g}")
    return int(value)


def from_ray24(config: dict[str, Any], scaling: ScalingConfig | None) -> dict[str, Any]:
    """A flat config with Ray 2.4's ``RLTrainer`` reading of ``scaling`` over it (as its ``_get_rllib_config``).

    Args:
        config: The flat config as the script wrote it.
        scaling: The script's ScalingConfig, or None to keep the config's own settings.
    """
    settings = translate_flat(config)
    if scaling is None:
        return settings
    settings["num_env_runners"] = scaling.max_workers
    per_worker = dict(scaling.resources_per_worker or {})
    if per_worker:
        settings["num_cpus_per_env_runner"] = per_worker.pop("CPU", 1)
        settings["num_gpus_per_env_runner"] = per_worker.pop("GPU", 0)
        if per_worker:
            settings["custom_resources_per_env_runner"] = per_worker
    if (cpus := (scaling.trainer_resources or {}).get("CPU", 0)) > 0:
        # The local learner runs in the algorithm's process: the trainer's CPUs are its CPUs too.
        settings["num_cpus_for_main_process"] = cpus
        settings.setdefault("num_cpus_per_learner", cpus)
    return settings


def settings_of(spec: coordinator_pb2.RLSpec) -> dict[str, Any]:
    """The flat RLlib settings a run's spec describes (a sectioned config's arguments merged)."""
    if spec.HasField("flat_config"):
        settings = translate_flat(struct_to_dict(spec.flat_config))
        settings.setdefault("num_env_runners", 0)  # not the algorithm's own default: what is reserved is said
        return settings
    return merged_sections(struct_to_dict(spec.config))


def merged_sections(sections: dict[str, Any]) -> dict[str, Any]:
    """A sectioned config's arguments as one flat mapping (the resource ones are attribute names)."""
    merged: dict[str, Any] = {"num_env_runners": 0}  # in the worker's process unless a section says so
    for section, section_args in sections.items():
        if not isinstance(section_args, dict):
            raise ValueError(f"section {section!r} must be a mapping of AlgorithmConfig.{section}() arguments")
        merged.update(section_args)
    return merged


def placement_bundles(settings: dict[str, Any]) -> list[dict[str, float]]:
    """The run's bundles in RLlib's order: the algorithm's process, env runners, evaluation runners, learners.

    Raises:
        ValueError: A count or resource amount that is not a plain number in range.
    """

    def runner_bundle(cfg: dict[str, Any]) -> dict[str, float]:
        bundle = {"CPU": _number(cfg, "num_cpus_per_env_runner", 1.0)}
        if (gpus := _number(cfg, "num_gpus_per_env_runner", 0.0)) > 0:
            bundle["GPU"] = gpus
        custom = cfg.get("custom_resources_per_env_runner") or {}
        if not isinstance(custom, dict):
            raise ValueError(f"custom_resources_per_env_runner must be a mapping, got {custom!r}")
        bundle.update({str(name): _number(custom, name, 0.0) for name in custom})
        return bundle

    evaluation = settings.get("evaluation_config") or {}
    if not isinstance(evaluation, dict):
        raise ValueError(f"evaluation_config must be a mapping, got {evaluation!r}")
    num_learners = _count(settings, "num_learners")
    learner_cpus = _number(settings, "num_cpus_per_learner", 1.0)  # RLlib's "auto" is 1 on CPUs
    main_cpus = _number(settings, "num_cpus_for_main_process", 1.0)
    bundles = [{"CPU": max(main_cpus, learner_cpus) if num_learners == 0 else main_cpus}]
    # Read even when no runner is asked for, so a bad amount is refused either way.
    runner, eval_runner = runner_bundle(settings), runner_bundle({**settings, **evaluation})
    bundles += [dict(runner) for _ in range(_count(settings, "num_env_runners"))]
    bundles += [dict(eval_runner) for _ in range(_count(settings, "evaluation_num_env_runners"))]
    bundles += [{"CPU": learner_cpus} for _ in range(num_learners)]
    return bundles
