"""``RLTrainer``: an RLlib algorithm on a gymnasium environment, declared by name."""

from __future__ import annotations

from typing import Any

from trainwire.config import ScalingConfig

# Where ``Algorithm.save_to_path`` puts a module's state (RLlib's COMPONENT_* names).
from trainwire.rllib.checkpoint import RLCheckpoint
from trainwire.rllib.framework import FRAMEWORK
from trainwire.trainer import BaseTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import coordinator_pb2


class RLTrainer(BaseTrainer):
    """Trains ``algorithm`` on ``env`` for ``num_iterations`` calls of ``Algorithm.train()``.

    Args:
        algorithm: An RLlib algorithm name ("PPO", "DQN", "SAC", ...).
        env: A registered gymnasium environment id ("CartPole-v1"), or "module:Id".
        config: AlgorithmConfig settings by section, each passed to the section's
            method, e.g. ``{"training": {"lr": 3e-4}, "env_runners": {"num_envs_per_env_runner": 2}}``.
            Env runners run inside the worker (``num_env_runners=0``) unless set here;
            remote ones are Ray actors outside the run's reserved resources.
        num_iterations: Training iterations (a run restarted from a checkpoint trains what is left).
        **kwargs: BaseTrainer arguments; ``scaling_config`` defaults to one worker.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = RLCheckpoint

    def __init__(
        self,
        algorithm: str,
        env: str,
        *,
        config: dict[str, Any] | None = None,
        num_iterations: int = 10,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("scaling_config", ScalingConfig(num_workers=1))
        super().__init__(**kwargs)
        if not isinstance(algorithm, str) or not algorithm:
            raise InvalidArgumentError("algorithm must be an RLlib algorithm name, e.g. 'PPO'", field="rl.algorithm")
        if not isinstance(env, str) or not env:
            raise InvalidArgumentError("env must be a gymnasium environment id", field="rl.env")
        if not isinstance(num_iterations, int) or num_iterations < 1:
            raise InvalidArgumentError(
                f"num_iterations must be an integer >= 1, got {num_iterations!r}", field="rl.num_iterations"
            )
        config = config or {}
        for section, settings in config.items():
            if not isinstance(settings, dict):
                raise InvalidArgumentError(
                    f"config[{section!r}] must be a dict of AlgorithmConfig.{section}() arguments",
                    field=f"rl.config.{section}",
                )
        self.algorithm = algorithm
        self.env = env
        self.config = config
        self.num_iterations = num_iterations

    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        request.rl.CopyFrom(
            coordinator_pb2.RLSpec(
                algorithm=self.algorithm,
                env=self.env,
                config=to_struct(self.config, "rl.config"),
                num_iterations=self.num_iterations,
            )
        )

    def _total_iterations(self) -> int | None:
        return self.num_iterations
