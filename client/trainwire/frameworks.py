"""The one table of frameworks, read by the SDK, the workers and the predictor.

Each framework declares, in ``trainwire/<framework>/framework.py``, a
``Framework``: its trainer, checkpoint and predictor classes, the worker
backend that runs it, the model files its checkpoints hold and the platform
the predictor serves it as. ``DECLARATIONS`` below registers them. Adding a
framework is a new package with that declaration, a backend module on the
worker side, and one line here; no component branches on a framework name.

Classes are named as ``"package.module:Class"`` and imported only when used, so
reading the table loads no framework.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwire.errors import InvalidArgumentError

# Modules that each define FRAMEWORK. Order matters for one thing only: when a
# checkpoint names no framework, the first whose model file it holds is taken.
DECLARATIONS: tuple[str, ...] = (
    "trainwire.xgboost.framework",
    "trainwire.lightgbm.framework",
    "trainwire.torch.framework",
    "trainwire.horovod.framework",
    "trainwire.huggingface.framework",
    "trainwire.tensorflow.framework",
    "trainwire.sklearn.framework",
    "trainwire.rllib.framework",
)


@dataclass(frozen=True)
class Framework:
    """What one framework is to every trainwire component.

    Args:
        name: The ``FitRequest.framework`` name, also written in checkpoint manifests.
        trainer: The SDK trainer class.
        checkpoint: The framework's ``Checkpoint`` class.
        predictor: The framework's ``Predictor`` class.
        backend: The worker backend class (in ``trainwire_worker``).
        platform: The platform ``ModelMetadata`` reports (KServe's model format names where they exist).
        model_file: The file (relative to the checkpoint) holding the model; "" for checkpoints
            that are folders of their own (RLlib's), which only their manifest names.
        serving_kwargs: ``predictor.from_checkpoint`` options the predictor service uses.
        compiles_trees: The predictor may compile the main model file with Treelite.
    """

    name: str
    trainer: str
    checkpoint: str
    predictor: str
    backend: str
    platform: str
    model_file: str = ""
    serving_kwargs: Mapping[str, Any] = field(default_factory=dict)
    compiles_trees: bool = False

    def trainer_class(self) -> type:
        return load_object(self.trainer)

    def checkpoint_class(self) -> type:
        return load_object(self.checkpoint)

    def predictor_class(self) -> type:
        return load_object(self.predictor)

    def backend_class(self) -> type:
        return load_object(self.backend)


def load_object(path: str) -> Any:
    """Imports ``"package.module:attribute"``."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


@functools.cache
def frameworks() -> Mapping[str, Framework]:
    """Every registered framework by name, in ``DECLARATIONS`` order."""
    table: dict[str, Framework] = {}
    for module in DECLARATIONS:
        declared: Framework = importlib.import_module(module).FRAMEWORK
        if declared.name in table:
            raise RuntimeError(f"framework {declared.name!r} is declared twice ({module})")
        table[declared.name] = declared
    return table


def names() -> list[str]:
    return sorted(frameworks())


def get_framework(name: str) -> Framework:
    """The framework registered as ``name``.

    Raises:
        InvalidArgumentError: No such framework (field ``framework``).
    """
    try:
        return frameworks()[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown framework {name!r}; known: {', '.join(names())}", field="framework"
        ) from None
