"""``RLPredictor``: greedy actions of a trained RLlib policy for batches of observations."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire.rllib.framework import FRAMEWORK


class RLPredictor(Predictor):
    """Maps observations (rows of a 2-D array or DataFrame) to actions.

    Runs the RLModule's ``forward_inference``; for discrete action spaces the
    action is the argmax of "action_dist_inputs" (greedy), otherwise the
    action distribution's deterministic sample. Observations go to the module
    as they are: env-to-module connectors beyond the defaults (e.g. mean-std
    filters) are not applied.

    Args:
        module: A torch RLModule (``RLCheckpoint.get_policy_module()``).
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: Observation columns, in order (None: as they come).
    """

    framework = FRAMEWORK.name
    input_datatype = "FP32"
    batch_invariant = False

    def __init__(self, module: Any, preprocessor: Any = None, feature_columns: list[str] | None = None) -> None:
        super().__init__(preprocessor, feature_columns)
        self.module = module

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, module_id: str | None = None, **kwargs: Any) -> RLPredictor:
        from trainwire.rllib.checkpoint import DEFAULT_MODULE_ID, RLCheckpoint

        module = RLCheckpoint(checkpoint.path, checkpoint.filesystem).get_policy_module(module_id or DEFAULT_MODULE_ID)
        return cls(module, **cls.checkpoint_defaults(checkpoint, kwargs))

    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        import torch
        from ray.rllib.core.columns import Columns
        from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical

        obs = torch.as_tensor(np.asarray(data, dtype=np.float32))
        with torch.no_grad():
            out = self.module.forward_inference({Columns.OBS: obs})
        if Columns.ACTIONS in out:
            return np.asarray(out[Columns.ACTIONS])
        logits = out[Columns.ACTION_DIST_INPUTS]
        dist_cls = self.module.get_inference_action_dist_cls()
        if dist_cls is None or issubclass(dist_cls, TorchCategorical):
            return logits.argmax(dim=-1).cpu().numpy()
        return dist_cls.from_logits(logits).to_deterministic().sample().cpu().numpy()
