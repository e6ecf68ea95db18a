"""RLlib checkpoints: an algorithm's checkpoint folder."""

from __future__ import annotations

import os
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire_core.errors import InvalidArgumentError

# Where ``Algorithm.save_to_path`` puts a module's state (RLlib's COMPONENT_* names).


_RL_MODULE_DIR = os.path.join("learner_group", "learner", "rl_module")
DEFAULT_MODULE_ID = "default_policy"


class RLCheckpoint(Checkpoint):
    """A checkpoint written by ``Algorithm.save_to_path`` (plus trainwire's metadata)."""

    def get_policy_module(self, module_id: str = DEFAULT_MODULE_ID) -> Any:
        """The trained RLModule (``module_id``: the policy of a multi-agent setup).

        The module is the learner's copy; call ``forward_inference`` on it
        (its output holds "action_dist_inputs").
        """
        from ray.rllib.core.rl_module.rl_module import RLModule

        with self.as_directory() as d:
            path = os.path.join(d, _RL_MODULE_DIR, module_id)
            if not os.path.isdir(path):
                found = (
                    sorted(os.listdir(os.path.join(d, _RL_MODULE_DIR)))
                    if os.path.isdir(os.path.join(d, _RL_MODULE_DIR))
                    else []
                )
                raise InvalidArgumentError(
                    f"checkpoint has no RLModule {module_id!r} (found: {', '.join(found) or 'none'})",
                    field="module_id",
                )
            return RLModule.from_checkpoint(os.path.abspath(path))

    get_model = get_policy_module

    def get_algorithm(self) -> Any:
        """The whole Algorithm, restored (it builds its env runners: call ``stop()`` when done)."""
        from ray.rllib.algorithms.algorithm import Algorithm

        with self.as_directory() as d:
            return Algorithm.from_checkpoint(os.path.abspath(d))
