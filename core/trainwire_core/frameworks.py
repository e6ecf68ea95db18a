"""The one table of frameworks, and the registries each distribution adds its half to.

A framework is declared once, by the SDK, in ``trainwire/<framework>/framework.py``:
its trainer, checkpoint and predictor classes, the model files its checkpoints
hold, the platform the predictor serves it as, and the package a worker needs
to run it (the module it imports, the distribution to install). Each distribution
registers its own half through a Python entry-point group, named by the framework:

- ``trainwire.frameworks``: the SDK's ``Framework`` declarations (pure data);
- ``trainwire.worker_backends``: the worker runtime's training function, only for the
  frameworks with worker code of their own (the declarative trainers); every other
  framework runs the user's loop, with what its declaration says it needs;
- ``trainwire.coordinator_backends``: the coordinator's half (validation, environment,
  rendezvous) per framework.

No distribution names another's classes; each half is found by the framework's
name. Classes are named ``"package.module:Class"`` and imported only when used,
so reading the table loads no framework library.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from trainwire_core.errors import FrameworkNotInstalledError, InvalidArgumentError

FRAMEWORKS_GROUP = "trainwire.frameworks"
WORKER_BACKENDS_GROUP = "trainwire.worker_backends"
COORDINATOR_BACKENDS_GROUP = "trainwire.coordinator_backends"


@dataclass(frozen=True)
class Framework:
    """What one framework is to every trainwire component.

    Args:
        name: The ``FitRequest.framework`` name, also written in checkpoint manifests.
        trainer: The SDK trainer class.
        checkpoint: The framework's ``Checkpoint`` class.
        predictor: The framework's ``Predictor`` class.
        platform: The platform ``ModelMetadata`` reports (KServe's model format names where they exist);
            "" for checkpoints the predictor serves only by the model file they hold.
        model_file: The file (relative to the checkpoint) holding the model; "" for checkpoints
            that are folders of their own (RLlib's), which only their manifest names.
        detection_order: When a checkpoint names no framework, the first (lowest) whose model
            file it holds is taken.
        serving_kwargs: ``predictor.from_checkpoint`` options the predictor service uses.
        compiles_trees: The predictor may compile the main model file with Treelite.
        unpickles: Loading its model may run code stored in the checkpoint (pickle, a full torch
            model, Keras or RLlib objects): the predictor loads it only from a trusted checkpoint.
        module: The module a worker imports to run it; a worker that lacks it fails at once
            with the install hint ("": nothing beyond the worker runtime).
        package: The distribution(s) that provide ``module`` (``pip install <package>``).
        install: How to install it, where that is not ``pip install <package>``.
    """

    name: str
    trainer: str
    checkpoint: str
    predictor: str
    platform: str
    model_file: str = ""
    detection_order: int = 100
    serving_kwargs: Mapping[str, Any] = field(default_factory=dict)
    compiles_trees: bool = False
    unpickles: bool = True
    module: str = ""
    package: str = ""
    install: str = ""

    def trainer_class(self) -> type:
        return load_object(self.trainer)

    def checkpoint_class(self) -> type:
        return load_object(self.checkpoint)

    def predictor_class(self) -> type:
        return load_object(self.predictor)


def load_object(path: str) -> Any:
    """Imports ``"package.module:attribute"``."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


@functools.cache
def frameworks() -> Mapping[str, Framework]:
    """Every declared framework by name, in detection order."""
    table: dict[str, Framework] = {}
    for ep in entry_points(group=FRAMEWORKS_GROUP):
        declared: Framework = ep.load()
        if declared.name != ep.name:
            raise RuntimeError(f"entry point {ep.name!r} of {FRAMEWORKS_GROUP} declares {declared.name!r}")
        table[declared.name] = declared
    return dict(sorted(table.items(), key=lambda item: (item[1].detection_order, item[0])))


def names() -> list[str]:
    return sorted(frameworks())


def get_framework(name: str) -> Framework:
    """The framework declared as ``name``.

    Raises:
        InvalidArgumentError: No such framework (field ``framework``).
    """
    try:
        return frameworks()[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown framework {name!r}; known: {', '.join(names())}", field="framework"
        ) from None


@functools.cache
def registered_half(group: str, name: str) -> type:
    """The class a distribution registered for framework ``name`` in entry-point ``group``.

    Raises:
        InvalidArgumentError: No framework of that name has a half in ``group`` (field ``framework``).
    """
    found = entry_points(group=group, name=name)
    if not found:
        known = sorted(ep.name for ep in entry_points(group=group))
        raise InvalidArgumentError(f"unknown framework {name!r}; known: {', '.join(known)}", field="framework")
    return next(iter(found)).load()


def require_installed(module: str, framework: str, package: str | None = None, install: str = "") -> None:
    """Raises FrameworkNotInstalledError unless ``module`` can be imported.

    Args:
        install: How to install it, when ``pip install <package>`` is not the way.
    """
    if importlib.util.find_spec(module) is None:
        raise FrameworkNotInstalledError(framework, package or module, install)
