"""``RLTrainer``: an RLlib algorithm on a gymnasium environment, declared by name, as Ray 2.x's."""

from __future__ import annotations

from typing import Any

from trainwire.config import RunConfig, ScalingConfig
from trainwire.rllib.checkpoint import RLCheckpoint
from trainwire.rllib.framework import FRAMEWORK
from trainwire.rllib.settings import from_ray24, is_sectioned
from trainwire.trainer import BaseTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import coordinator_pb2


class RLTrainer(BaseTrainer):
    """Trains an RLlib ``algorithm`` for ``num_iterations`` calls of ``Algorithm.train()``.

    Takes Ray 2.x's form, a flat ``config`` with ``"env"`` whose remote env runners
    ``scaling_config`` sets (as Ray 2.4's ``RLTrainer``)::

        RLTrainer(
            algorithm="PPO",
            config={"env": "CartPole-v1", "evaluation_num_workers": 1, "evaluation_interval": 1},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(stop={"training_iteration": 5}),
        )

    or a config by AlgorithmConfig section, with ``env=`` (env runners in the worker's
    process unless the ``env_runners`` section asks for remote ones)::

        RLTrainer("PPO", env="CartPole-v1", config={"training": {"lr": 3e-4}}, num_iterations=10)

    Remote env runners, evaluation runners and learners get bundles of their own in the
    run's placement group, so they never wait on resources the run did not reserve.

    Args:
        algorithm: An RLlib algorithm name ("PPO", "DQN", "SAC", ...).
        config: A flat config (Ray 2.x's keys; Ray 2.4's renamed ones are mapped) or one
            by section, e.g. ``{"training": {"lr": 3e-4}, "env_runners": {"num_env_runners": 2}}``.
        scaling_config: With a flat config, as Ray 2.4 read it: ``num_workers`` remote env
            runners of ``resources_per_worker`` each, and ``trainer_resources`` for the
            algorithm's own process (its local learner included). With sections: the one worker.
        run_config: As every trainer's; ``stop={"training_iteration": n}`` sets ``num_iterations``.
        env: A registered gymnasium environment id ("CartPole-v1"), or "module:Id"
            (a flat config may name it as ``"env"`` instead).
        num_iterations: Training iterations (a run restarted from a checkpoint trains what is left);
            default ``run_config.stop["training_iteration"]``, else 10.
        **kwargs: Other BaseTrainer arguments.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = RLCheckpoint

    def __init__(
        self,
        algorithm: str,
        config: dict[str, Any] | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        *,
        env: str | None = None,
        num_iterations: int | None = None,
        **kwargs: Any,
    ) -> None:
        config = dict(config or {})
        if not isinstance(algorithm, str) or not algorithm:
            raise InvalidArgumentError("algorithm must be an RLlib algorithm name, e.g. 'PPO'", field="rl.algorithm")
        self.sectioned = is_sectioned(config)
        if self.sectioned or not config:
            self.flat_config = None
            env = env or ""
        else:
            env = env or config.get("env") or ""
            # Ray 2.4 read its ScalingConfig into RLlib's settings; the run itself is one worker.
            self.flat_config = from_ray24(config, ScalingConfig.coerce(scaling_config) if scaling_config else None)
            self.flat_config["env"] = env
            scaling_config = ScalingConfig(num_workers=1)
        if not isinstance(env, str) or not env:
            raise InvalidArgumentError(
                "env must be a gymnasium environment id (env=..., or config['env'])", field="rl.env"
            )
        super().__init__(scaling_config=scaling_config or ScalingConfig(num_workers=1), run_config=run_config, **kwargs)
        if num_iterations is None:
            num_iterations = int((self.run_config.stop or {}).get("training_iteration", 10))
        if not isinstance(num_iterations, int) or num_iterations < 1:
            raise InvalidArgumentError(
                f"num_iterations must be an integer >= 1, got {num_iterations!r}", field="rl.num_iterations"
            )
        if self.sectioned:
            for section, settings in config.items():
                if not isinstance(settings, dict):
                    raise InvalidArgumentError(
                        f"config[{section!r}] must be a dict of AlgorithmConfig.{section}() arguments",
                        field=f"rl.config.{section}",
                    )
        self.algorithm = algorithm
        self.env = env
        self.config = config if self.sectioned else {}
        self.num_iterations = num_iterations

    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        spec = coordinator_pb2.RLSpec(
            algorithm=self.algorithm,
            env=self.env,
            config=to_struct(self.config, "rl.config"),
            num_iterations=self.num_iterations,
        )
        if self.flat_config is not None:
            spec.flat_config.CopyFrom(to_struct(self.flat_config, "rl.flat_config"))
        request.rl.CopyFrom(spec)

    def _total_iterations(self) -> int | None:
        return self.num_iterations
