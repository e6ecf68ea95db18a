"""Function and class trainables, as Ray Tune's: ``Tuner(train_fn, param_space={"lr": ...})`` with
``tune.report``, or ``Tuner(MyTrainable, ...)`` with a ``tune.Trainable`` subclass.

A function trainable runs as a one-worker ``DataParallelTrainer`` whose ``train_loop_config``
is the trial's config: ``tune.report`` is ``train.report`` there, and ``tune.with_resources``
sets that worker's resources. A class trainable runs the same way, its loop being
``class_trainable.run_trainable``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from trainwire import train
from trainwire.checkpoint import Checkpoint
from trainwire.config import RunConfig, ScalingConfig
from trainwire.tune.class_trainable import Trainable, TrainableOptions, run_trainable
from trainwire.tune.placement_groups import PlacementGroupFactory
from trainwire_core.errors import InvalidArgumentError


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """Reports a trial's metrics (and a checkpoint), as ``ray.tune.report``."""
    train.report(metrics, checkpoint=checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The trial's latest checkpoint (after a restart), as ``ray.tune.get_checkpoint``."""
    return train.get_checkpoint()


class WithResources:
    """A trainable with the resources each of its trials reserves (``tune.with_resources``)."""

    def __init__(self, trainable: Any, resources: dict[str, float]) -> None:
        self.trainable, self.resources = trainable, resources


_NAMED = {"cpu": "CPU", "gpu": "GPU", "memory": "memory"}


def trial_resources(resources: Any, field: str = "trainable.resources") -> dict[str, float]:
    """Ray's resource forms (a dict with Ray's keys in either case, ``custom_resources`` nested, or a
    PlacementGroupFactory) as the one worker's resources.

    Raises:
        InvalidArgumentError: Anything else (a function of the config, say), or an amount below 0.
    """
    if isinstance(resources, PlacementGroupFactory):
        if len(resources.bundles) > 1:
            warnings.warn(
                f"{field}: a trainwire trial is one worker process, so it reserves the sum of the "
                f"{len(resources.bundles)} bundles ({resources.required_resources}) on one node; "
                "use a trainer's ScalingConfig for groups of workers",
                UserWarning,
                stacklevel=3,
            )
        return resources.required_resources
    if not isinstance(resources, dict):
        raise InvalidArgumentError(
            f"{field} takes a dict such as {{'cpu': 2, 'gpu': 0}} or a PlacementGroupFactory, "
            f"got {type(resources).__name__} (resources chosen per config are not supported)",
            field=field,
        )
    flat = {k: v for k, v in resources.items() if k != "custom_resources"}
    flat.update(resources.get("custom_resources") or {})
    out: dict[str, float] = {}
    for key, amount in flat.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            raise InvalidArgumentError(f"resources[{key!r}] must be a number >= 0", field=field)
        out[_NAMED.get(str(key).lower(), str(key))] = float(amount)
    return out


def with_resources(trainable: Any, resources: dict[str, float] | PlacementGroupFactory) -> WithResources:
    """Gives a function or class trainable's trials these resources, e.g. ``{"cpu": 2}`` (Ray's keys,
    either case) or a ``PlacementGroupFactory`` (its bundles summed: a trial is one worker).

    Raises:
        InvalidArgumentError: ``resources`` is neither (a function of the config, say).
    """
    return WithResources(trainable, trial_resources(resources))


def with_parameters(trainable: Any, **kwargs: Any) -> Any:
    """Passes large objects to a trainable as keyword arguments (``tune.with_parameters``): a function's
    call, a class's ``setup(config, **kwargs)``.

    They travel pickled with the trainable, once per trial.
    """
    resources = None
    if isinstance(trainable, WithResources):
        trainable, resources = trainable.trainable, trainable.resources
    if is_class_trainable(trainable):
        cls = trainable

        def setup(self: Any, config: dict[str, Any]) -> None:
            cls.setup(self, config, **kwargs)

        # Named after the user's module, so that module's code is pickled by value with it.
        wrapped: Any = type(cls.__name__, (cls,), {"setup": setup, "__module__": cls.__module__})
    else:

        def trainable_with_parameters(config: dict[str, Any]) -> Any:
            return trainable(config, **kwargs)

        trainable_with_parameters.__module__ = getattr(trainable, "__module__", __name__)
        wrapped = trainable_with_parameters
    return WithResources(wrapped, resources) if resources is not None else wrapped


def is_class_trainable(trainable: Any) -> bool:
    """A ``tune.Trainable`` subclass (or one ``with_resources`` gave resources)."""
    if isinstance(trainable, WithResources):
        trainable = trainable.trainable
    return isinstance(trainable, type) and issubclass(trainable, Trainable)


def is_function_trainable(trainable: Any) -> bool:
    """A function of the config, or a Trainable class (either wrapped by ``with_resources``)."""
    return (
        isinstance(trainable, WithResources)
        or is_class_trainable(trainable)
        or (callable(trainable) and not isinstance(trainable, type))
    )


def class_loop(cls: type[Trainable], options: TrainableOptions) -> Callable[[dict[str, Any]], None]:
    """The training loop that runs a trial of a Trainable class."""

    def trainable_loop(config: dict[str, Any]) -> None:
        run_trainable(cls, config, options)

    # Named after the class's module, so its code is pickled by value with the loop.
    trainable_loop.__module__ = cls.__module__
    trainable_loop.__name__ = trainable_loop.__qualname__ = cls.__name__
    return trainable_loop


def as_trainer(trainable: Any, run_config: RunConfig | None = None) -> Any:
    """A function or class trainable as the one-worker DataParallelTrainer that runs each of its trials.

    Args:
        trainable: The function, the Trainable class, or either wrapped by ``with_resources``.
        run_config: The search's: a class trainable's loop checkpoints by its ``checkpoint_config``
            and ends at its ``stop`` dict.
    """
    from trainwire.trainer import DataParallelTrainer

    resources = None
    if isinstance(trainable, WithResources):
        trainable, resources = trainable.trainable, trainable.resources
    if is_class_trainable(trainable):
        if resources is None and trainable.default_resource_request({}) is not None:
            resources = trial_resources(trainable.default_resource_request({}), "trainable.default_resource_request")
        run_config = run_config or RunConfig()
        checkpoints = run_config.checkpoint_config
        stop = run_config.stop if isinstance(run_config.stop, dict) else {}
        options = TrainableOptions(
            checkpoint_frequency=checkpoints.checkpoint_frequency or 0,
            checkpoint_at_end=bool(checkpoints.checkpoint_at_end),
            stop=dict(stop),
        )
        trainable = class_loop(trainable, options)
    scaling = ScalingConfig(num_workers=1, resources_per_worker=resources or None)
    return DataParallelTrainer(trainable, train_loop_config={}, scaling_config=scaling)
