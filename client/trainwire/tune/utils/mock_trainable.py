"""``ray.tune.utils.mock_trainable``: the class trainable Ray's scheduler examples search over.

``MyTrainableClass`` is a ``tune.Trainable`` whose learning curve is a sigmoid: ``width`` sets its
slope and ``height`` its maximum ``episode_reward_mean``; it checkpoints its timestep.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from trainwire.tune.class_trainable import Trainable

__all__ = ["MOCK_ERROR_KEY", "MOCK_TRAINABLE_NAME", "MyTrainableClass", "register_mock_trainable"]

MOCK_TRAINABLE_NAME = "mock_trainable"
MOCK_ERROR_KEY = "mock_error"


class MyTrainableClass(Trainable):
    """Example agent whose learning curve is a random sigmoid (as Ray's)."""

    def setup(self, config: dict[str, Any]) -> None:
        self._sleep_time = config.get("sleep", 0)
        self._mock_error = config.get(MOCK_ERROR_KEY, False)
        self._persistent_error = config.get("persistent_error", False)
        self.timestep = 0
        self.restored = False

    def step(self) -> dict[str, Any]:
        # Fails after the first checkpoint when asked to, to exercise restores.
        if self._mock_error and self.timestep > 0 and (self._persistent_error or not self.restored):
            raise RuntimeError(f"Failing on purpose! {self.timestep=}")
        if self._sleep_time > 0:
            time.sleep(self._sleep_time)
        self.timestep += 1
        v = np.tanh(float(self.timestep) / self.config.get("width", 1))
        v *= self.config.get("height", 1)
        return {"episode_reward_mean": float(v)}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "checkpoint"), "w") as f:
            f.write(json.dumps({"timestep": self.timestep}))

    def load_checkpoint(self, checkpoint_dir: Any) -> None:
        with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
            self.timestep = json.loads(f.read())["timestep"]
        self.restored = True


def register_mock_trainable() -> None:
    """Register ``MyTrainableClass`` as ``"mock_trainable"``."""
    from trainwire.tune.registry import register_trainable

    register_trainable(MOCK_TRAINABLE_NAME, MyTrainableClass)
