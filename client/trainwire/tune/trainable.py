"""Function trainables, as Ray Tune's: ``Tuner(train_fn, param_space={"lr": ...})`` with ``tune.report``.

A function trainable runs as a one-worker ``DataParallelTrainer`` whose ``train_loop_config``
is the trial's config: ``tune.report`` is ``train.report`` there, and ``tune.with_resources``
sets that worker's resources.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.config import ScalingConfig
from trainwire_core.errors import InvalidArgumentError


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """Reports a trial's metrics (and a checkpoint), as ``ray.tune.report``."""
    train.report(metrics, checkpoint=checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The trial's latest checkpoint (after a restart), as ``ray.tune.get_checkpoint``."""
    return train.get_checkpoint()


class WithResources:
    """A function trainable with the resources each of its trials reserves (``tune.with_resources``)."""

    def __init__(self, trainable: Callable[..., Any], resources: dict[str, float]) -> None:
        self.trainable, self.resources = trainable, resources


def with_resources(trainable: Callable[..., Any], resources: dict[str, float]) -> WithResources:
    """Gives a function trainable's trials these resources, e.g. ``{"cpu": 2}`` (Ray's keys, either case).

    Raises:
        InvalidArgumentError: ``resources`` is not a dict of amounts (a PlacementGroupFactory, say).
    """
    if not isinstance(resources, dict):
        raise InvalidArgumentError(
            "with_resources takes a dict such as {'cpu': 2, 'gpu': 0}; placement group factories are not "
            "supported (a trainer's ScalingConfig describes groups of workers)",
            field="trainable.resources",
        )
    named = {"cpu": "CPU", "gpu": "GPU", "memory": "memory"}
    out: dict[str, float] = {}
    for key, amount in resources.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            raise InvalidArgumentError(f"resources[{key!r}] must be a number >= 0", field="trainable.resources")
        out[named.get(str(key).lower(), str(key))] = float(amount)
    return WithResources(trainable, out)


def with_parameters(trainable: Callable[..., Any], **kwargs: Any) -> Callable[[dict[str, Any]], Any]:
    """Passes large objects to a function trainable as keyword arguments (``tune.with_parameters``).

    They travel pickled with the function, once per trial.
    """
    resources = None
    if isinstance(trainable, WithResources):
        trainable, resources = trainable.trainable, trainable.resources

    def trainable_with_parameters(config: dict[str, Any]) -> Any:
        return trainable(config, **kwargs)

    # Named after the user's module, so that module's code is pickled by value with it.
    trainable_with_parameters.__module__ = getattr(trainable, "__module__", __name__)
    wrapped: Any = trainable_with_parameters
    return WithResources(wrapped, resources) if resources is not None else wrapped


def is_function_trainable(trainable: Any) -> bool:
    return isinstance(trainable, WithResources) or (callable(trainable) and not isinstance(trainable, type))


def as_trainer(trainable: Any) -> Any:
    """A function trainable as the one-worker DataParallelTrainer that runs each of its trials."""
    from trainwire.trainer import DataParallelTrainer

    resources = None
    if isinstance(trainable, WithResources):
        trainable, resources = trainable.trainable, trainable.resources
    scaling = ScalingConfig(num_workers=1, resources_per_worker=resources or None)
    return DataParallelTrainer(trainable, train_loop_config={}, scaling_config=scaling)
