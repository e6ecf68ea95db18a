"""``LightGBMConfig`` and ``get_network_params``, as ``ray.train.lightgbm``'s."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# This worker process's part in the run's LightGBM network, set by the worker runtime before the
# training function starts and cleared after it.
_network_params: dict[str, Any] | None = None
_network_params_lock = threading.Lock()


@dataclass
class LightGBMConfig:
    """How the workers of a ``LightGBMTrainer`` with a training function find each other.

    Before the function runs, every worker is given a listening port and the list of all
    workers' addresses: ``get_network_params()`` returns them for ``lightgbm.train``'s params.
    It has no options (as Ray's).
    """

    def to_dict(self) -> dict[str, Any]:
        return {}


def get_network_params() -> dict[str, Any]:
    """This worker's LightGBM network params: ``num_machines``, ``machines``, ``local_listen_port``.

    Merge them into ``lightgbm.train``'s params, with ``tree_learner="data_parallel"`` and
    ``pre_partition=True``, inside a ``LightGBMTrainer``'s training function; elsewhere an empty
    dict (with a warning), as Ray's.
    """
    with _network_params_lock:
        if not _network_params:
            logger.warning(
                "trainwire.train.lightgbm.get_network_params() was called outside the training function of a "
                "LightGBMTrainer: this process belongs to no worker group, so it returns an empty dict"
            )
            return {}
        return dict(_network_params)


def _set_network_params(params: dict[str, Any] | None) -> None:
    """Sets (or, with None, clears) this process's network params; the worker runtime calls it."""
    global _network_params
    with _network_params_lock:
        _network_params = dict(params) if params is not None else None
