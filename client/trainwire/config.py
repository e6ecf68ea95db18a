"""Configuration objects mirroring ``ray.train``'s, validated on construction."""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf import json_format, message, struct_pb2

from trainwire.runtime_env import check as runtime_env_check
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


MAX_WORKERS = 10_000
# Ray's accelerator_type: a custom resource every node with that accelerator has 1 of.
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
ACCELERATOR_SLIVER = 0.001
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def check_structs(msg: message.Message, prefix: str = "") -> None:
    """Raises InvalidArgumentError naming the first Struct in ``msg`` that is not JSON (NaN, Infinity)."""
    for desc, value in msg.ListFields():
        if desc.message_type is None:
            continue
        name = f"{prefix}{desc.name}"
        if desc.message_type.GetOptions().map_entry:
            items = [(f"{name}[{key}]", item) for key, item in value.items()]
        elif isinstance(value, message.Message):
            items = [(name, value)]
        else:  # a repeated field
            items = [(f"{name}[{i}]", item) for i, item in enumerate(value)]
        for path, item in items:
            if isinstance(item, struct_pb2.Struct):
                try:
                    json_format.MessageToDict(item)
                except ValueError as exc:
                    raise InvalidArgumentError(f"{path} must be JSON: {exc}", field=path) from exc
            elif isinstance(item, message.Message):
                check_structs(item, f"{path}.")


def _check_resources(resources: dict[str, float] | None, name: str) -> None:
    for key, value in (resources or {}).items():
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise InvalidArgumentError(f"{name}[{key!r}] must be a finite number >= 0, got {value!r}", field=name)


def _check_storage_path(value: str) -> None:
    """A run's own store: a URI or an absolute path, with no ".." to climb out of it."""
    field = "run_config.storage_path"
    if len(value) > 1024 or not value.isprintable():
        raise InvalidArgumentError("run_config.storage_path must be at most 1024 printable characters", field=field)
    if not _URI_SCHEME.match(value) and not value.startswith("/"):
        raise InvalidArgumentError(
            f"run_config.storage_path must be a URI (file://, s3://) or an absolute path, got {value!r}; "
            "a relative path would be relative to wherever the coordinator runs",
            field=field,
        )
    if ".." in value.split("?", 1)[0].replace("\\", "/").split("/"):
        raise InvalidArgumentError(f"run_config.storage_path must not contain '..', got {value!r}", field=field)


def is_search_domain(value: Any) -> bool:
    """A tune sampler or grid (ours, or Ray's ``{"grid_search": [...]}``), which a Tuner resolves per trial."""
    from trainwire.tune.search.sample import Domain, is_grid_marker  # trainwire.tune imports this module

    # Only a dict naming "grid_search" can be a grid: a plain config value never needs the full check.
    return isinstance(value, Domain) or (isinstance(value, dict) and "grid_search" in value and is_grid_marker(value))


def _searched_fields(config: object, names: tuple[str, ...]) -> list[str]:
    """The fields of a config object that hold search domains (a dict field's values too)."""
    out = []
    for name in names:
        value = getattr(config, name)
        if is_search_domain(value) or (isinstance(value, dict) and any(is_search_domain(v) for v in value.values())):
            out.append(name)
    return out


@dataclass
class ScalingConfig:
    """How many workers a run gets and what each one reserves.

    Args:
        num_workers: Number of worker processes (>= 1), or ``(min, max)`` for an elastic run
            (as in Ray Train V2): it starts with as many as fit, at least ``min``, and grows
            at checkpoints up to ``max``. 0 is Ray Train V2's local mode: ``fit()`` runs the
            loop in the calling process, with no coordinator and no Ray (for debugging).
        use_gpu: Give each worker one GPU.
        accelerator_type: Place workers only on nodes with this accelerator (e.g. "A100"), as
            Ray does: each worker asks for a sliver of the ``accelerator_type:<type>`` resource.
        resources_per_worker: Resources each worker reserves; default {"CPU": 1}.
        trainer_resources: Extra resources reserved for the run's trainer bundle.
        placement_strategy: PACK, SPREAD, STRICT_PACK or STRICT_SPREAD.
        elastic_resize_monitor_interval_s: Ray 2.60's polling period (>= 0) for growing an elastic group.
            trainwire does not poll: an elastic group is considered for growth at each committed
            checkpoint (a resize restarts from one), so the value is checked and kept, and changes
            nothing.

    As in Ray, any field may hold a search domain (``tune.grid_search([1, 2])``,
    ``tune.choice(...)``) when the config is a Tuner's ``param_space["scaling_config"]``: the
    search resolves it per trial, and it is checked then. A trainer refuses one at ``fit()``.
    """

    num_workers: int | tuple[int, int] = 1
    use_gpu: bool = False
    resources_per_worker: dict[str, float] | None = None
    trainer_resources: dict[str, float] | None = None
    placement_strategy: str = "PACK"
    accelerator_type: str | None = None
    elastic_resize_monitor_interval_s: float = 60.0

    @classmethod
    def coerce(cls, value: object) -> ScalingConfig:
        """This class's own, or one built from Ray's ``ray.air.config.ScalingConfig`` (the same fields)."""
        if isinstance(value, cls):
            return value
        kind = type(value)
        if kind.__name__ == "ScalingConfig" and kind.__module__.startswith("ray."):
            return cls(
                num_workers=value.num_workers or 1,
                use_gpu=bool(value.use_gpu),
                resources_per_worker=value.resources_per_worker,
                trainer_resources=value.trainer_resources,
                placement_strategy=value.placement_strategy,
            )
        raise InvalidArgumentError("scaling_config must be a ScalingConfig", field="scaling_config")

    def __post_init__(self) -> None:
        searched = _searched_fields(
            self, ("num_workers", "use_gpu", "resources_per_worker", "trainer_resources", "placement_strategy")
        )
        self._searched = searched
        if searched:
            return  # checked per trial, once the search has drawn its values
        if isinstance(self.num_workers, list | tuple):
            bounds = tuple(self.num_workers)
            if len(bounds) != 2 or not all(type(n) is int for n in bounds) or not 1 <= bounds[0] <= bounds[1]:
                raise InvalidArgumentError(
                    f"scaling_config.num_workers must be an integer >= 1 or (min, max) with 1 <= min <= max, "
                    f"got {self.num_workers!r}",
                    field="scaling_config.num_workers",
                )
            self.num_workers = bounds if bounds[0] < bounds[1] else bounds[0]
        elif type(self.num_workers) is not int or self.num_workers < 0:
            raise InvalidArgumentError(
                f"scaling_config.num_workers must be an integer >= 1 (or 0: local mode), got {self.num_workers!r}",
                field="scaling_config.num_workers",
            )
        if self.max_workers > MAX_WORKERS:
            # Placement plans one bundle per worker: 2**31 of them would take the coordinator's memory.
            raise InvalidArgumentError(
                f"scaling_config.num_workers must be at most {MAX_WORKERS}, got {self.max_workers}",
                field="scaling_config.num_workers",
            )
        if self.placement_strategy not in _STRATEGIES:
            raise InvalidArgumentError(
                f"scaling_config.placement_strategy must be one of {', '.join(_STRATEGIES)}, "
                f"got {self.placement_strategy!r}",
                field="scaling_config.placement_strategy",
            )
        _check_resources(self.resources_per_worker, "scaling_config.resources_per_worker")
        _check_resources(self.trainer_resources, "scaling_config.trainer_resources")
        interval = self.elastic_resize_monitor_interval_s
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise ValueError("ScalingConfig(elastic_resize_monitor_interval_s) must be non-negative.")
        accelerator = self.accelerator_type
        if accelerator is not None and (
            not isinstance(accelerator, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", accelerator)
        ):
            raise InvalidArgumentError(
                f"scaling_config.accelerator_type must be a name such as 'A100', got {self.accelerator_type!r}",
                field="scaling_config.accelerator_type",
            )

    @property
    def local_mode(self) -> bool:
        """``num_workers=0``: the loop runs in the calling process."""
        return self.num_workers == 0

    @property
    def worker_resources(self) -> dict[str, float]:
        """What one worker reserves, GPU included."""
        res = dict(self.resources_per_worker or {"CPU": 1.0})
        if self.use_gpu:
            res.setdefault("GPU", 1.0)
        if self.accelerator_type:
            res.setdefault(f"{ACCELERATOR_RESOURCE_PREFIX}{self.accelerator_type}", ACCELERATOR_SLIVER)
        return res

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def searched_fields(self) -> list[str]:
        """The fields that hold search domains (resolved per trial by a Tuner)."""
        return list(getattr(self, "_searched", []))

    def to_proto(self) -> common_pb2.ScalingConfig:
        if self.searched_fields:
            name = self.searched_fields[0]
            raise InvalidArgumentError(
                f"scaling_config.{name} is a search domain: only a Tuner resolves it, per trial; put this "
                "ScalingConfig in Tuner(param_space={'scaling_config': ...}), or give a value",
                field=f"scaling_config.{name}",
            )
        if self.local_mode:
            raise InvalidArgumentError(
                "scaling_config.num_workers=0 is local mode: fit() runs it in this process, not on a coordinator",
                field="scaling_config.num_workers",
            )
        resources = dict(self.resources_per_worker or {})
        if self.accelerator_type:
            if not resources:
                resources["CPU"] = 1.0
            resources.setdefault(f"{ACCELERATOR_RESOURCE_PREFIX}{self.accelerator_type}", ACCELERATOR_SLIVER)
        return common_pb2.ScalingConfig(
            num_workers=self.max_workers,
            min_workers=self.min_workers if isinstance(self.num_workers, tuple) else 0,
            use_gpu=self.use_gpu,
            resources_per_worker=resources,
            trainer_resources=self.trainer_resources or {},
            placement_strategy=self.placement_strategy,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.ScalingConfig) -> ScalingConfig:
        if msg.num_workers < 1:  # local mode never reaches a coordinator
            raise InvalidArgumentError(
                f"scaling_config.num_workers must be an integer >= 1, got {msg.num_workers}",
                field="scaling_config.num_workers",
            )
        if msg.min_workers and not 1 <= msg.min_workers <= msg.num_workers:
            raise InvalidArgumentError(
                f"scaling_config.min_workers must be between 1 and num_workers ({msg.num_workers}), "
                f"got {msg.min_workers}",
                field="scaling_config.min_workers",
            )
        return cls(
            num_workers=(msg.min_workers, msg.num_workers) if msg.min_workers else msg.num_workers,
            use_gpu=msg.use_gpu,
            resources_per_worker=dict(msg.resources_per_worker) or None,
            trainer_resources=dict(msg.trainer_resources) or None,
            placement_strategy=msg.placement_strategy or "PACK",
        )


@dataclass
class FailureConfig:
    """How many worker-group failures a run survives.

    Args:
        max_failures: Restarts from the latest checkpoint; -1 for unlimited.
        fail_fast: Fail at the first error whatever ``max_failures`` says.
    """

    max_failures: int = 0
    fail_fast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise InvalidArgumentError(
                f"run_config.failure_config.max_failures must be -1 (unlimited) or >= 0, got {self.max_failures!r}",
                field="run_config.failure_config.max_failures",
            )

    def to_proto(self) -> common_pb2.FailureConfig:
        return common_pb2.FailureConfig(max_failures=self.max_failures, fail_fast=self.fail_fast)

    @classmethod
    def from_proto(cls, msg: common_pb2.FailureConfig) -> FailureConfig:
        return cls(max_failures=msg.max_failures, fail_fast=msg.fail_fast)


@dataclass
class CheckpointConfig:
    """Which checkpoints a run keeps.

    Args:
        num_to_keep: Keep the best N (by the score attribute, else the newest);
            None keeps all. The latest checkpoint is always kept.
        checkpoint_score_attribute: Metric that ranks checkpoints.
        checkpoint_score_order: "max" or "min".
        checkpoint_frequency: Built-in trainers: checkpoint every N iterations.
        checkpoint_at_end: Built-in trainers: checkpoint when training ends.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool = True

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (not isinstance(self.num_to_keep, int) or self.num_to_keep < 1):
            raise InvalidArgumentError(
                f"run_config.checkpoint_config.num_to_keep must be None (keep all) or >= 1, got {self.num_to_keep!r}",
                field="run_config.checkpoint_config.num_to_keep",
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise InvalidArgumentError(
                f"run_config.checkpoint_config.checkpoint_score_order must be 'max' or 'min', "
                f"got {self.checkpoint_score_order!r}",
                field="run_config.checkpoint_config.checkpoint_score_order",
            )
        if not isinstance(self.checkpoint_frequency, int) or self.checkpoint_frequency < 0:
            raise InvalidArgumentError(
                f"run_config.checkpoint_config.checkpoint_frequency must be >= 0, got {self.checkpoint_frequency!r}",
                field="run_config.checkpoint_config.checkpoint_frequency",
            )

    def to_proto(self) -> common_pb2.CheckpointConfig:
        msg = common_pb2.CheckpointConfig(
            checkpoint_score_attribute=self.checkpoint_score_attribute or "",
            checkpoint_score_order=self.checkpoint_score_order,
            checkpoint_frequency=self.checkpoint_frequency,
            checkpoint_at_end=self.checkpoint_at_end,
        )
        if self.num_to_keep is not None:
            msg.num_to_keep = self.num_to_keep
        return msg

    @classmethod
    def from_proto(cls, msg: common_pb2.CheckpointConfig) -> CheckpointConfig:
        return cls(
            num_to_keep=msg.num_to_keep if msg.HasField("num_to_keep") else None,
            checkpoint_score_attribute=msg.checkpoint_score_attribute or None,
            checkpoint_score_order=msg.checkpoint_score_order or "max",  # type: ignore[arg-type]
            checkpoint_frequency=msg.checkpoint_frequency,
            checkpoint_at_end=msg.checkpoint_at_end if msg.HasField("checkpoint_at_end") else True,
        )


@dataclass
class SyncConfig:
    """Mirrors ``ray.train.SyncConfig``; checkpoints go straight to the shared store.

    Args:
        sync_period_s: How often each worker's artifact directory (``get_trial_dir()``) is
            copied to ``runs/<run_id>/artifacts/rank_<rank>/`` in the store; 0: only at
            checkpoints and at the end.
        sync_timeout_s: The longest training waits for one sync (> 0 when syncing).
        sync_artifacts: Sync artifact directories at all.
        sync_artifacts_on_checkpoint: Also sync whenever a worker reports a checkpoint.
    """

    sync_period_s: float = 300.0
    sync_timeout_s: float = 1800.0
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True
    # Ray 2.4's cloud directory for results; RunConfig takes it as its storage_path.
    upload_dir: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.upload_dir is not None:
            warnings.warn(
                "SyncConfig(upload_dir=...) is deprecated, as in Ray: use RunConfig(storage_path=...)",
                DeprecationWarning,
                stacklevel=3,
            )
        for name in ("sync_period_s", "sync_timeout_s"):
            if not getattr(self, name) >= 0:  # NaN too
                raise InvalidArgumentError(
                    f"run_config.sync_config.{name} must be >= 0", field=f"run_config.sync_config.{name}"
                )
        if self.sync_artifacts and not self.sync_timeout_s > 0:
            raise InvalidArgumentError(
                "run_config.sync_config.sync_timeout_s must be > 0 to sync artifacts",
                field="run_config.sync_config.sync_timeout_s",
            )

    def to_proto(self) -> common_pb2.SyncConfig:
        return common_pb2.SyncConfig(
            sync_period_s=self.sync_period_s,
            sync_timeout_s=self.sync_timeout_s,
            sync_artifacts=self.sync_artifacts,
            sync_artifacts_on_checkpoint=self.sync_artifacts_on_checkpoint,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.SyncConfig) -> SyncConfig:
        if msg == common_pb2.SyncConfig():
            return cls()
        return cls(msg.sync_period_s, msg.sync_timeout_s, msg.sync_artifacts, msg.sync_artifacts_on_checkpoint)


@dataclass
class RunConfig:
    """Mirrors ``ray.train.RunConfig``.

    Args:
        name: The run's name; models are served under it. Default: generated.
        storage_path: Shared-store URI; default: the coordinator's store.
        stop: Stop once a reported metric reaches a threshold, e.g.
            {"training_iteration": 10}; for a Tuner also, as Ray, a ``tune.Stopper``, a list
            of them, or a function of ``(trial_id, result)`` (see ``trainwire.tune.stopper``).
        failure_config: Restart policy.
        checkpoint_config: Retention policy.
        sync_config: Artifact syncing (SyncConfig).
        local_dir: Deprecated (Ray 2.4's results directory): taken as ``storage_path`` when
            neither that nor ``sync_config.upload_dir`` is set.
        runtime_env: Code and settings that travel with the run, Ray's keys
            (``working_dir``, ``py_modules``, ``pip``, ``env_vars``, ``excludes``): see
            ``trainwire.runtime_env``. ``worker_runtime_env`` (Ray Train's name) is the same.
        callbacks: ``trainwire.callbacks.RunCallback`` objects (experiment trackers, V2
            ``UserCallback``) the SDK calls from the run's event stream; they stay in this process.
        logging_config: A ``LoggingConfig`` (trainwire's or Ray's): its ``log_level`` travels with
            the run and sets the workers' ``ray.train`` and ``trainwire.train`` loggers' level
            (its encoding is not used: worker lines are captured as written).
        progress_reporter: A Tune ``ProgressReporter``: a Tuner (and ``tune.run``) prints its table
            in place of the change lines, as Ray's; a trainer's ``fit()`` does not use it.
        log_to_file: As Ray's: True writes the workers' stdout and stderr to files ``stdout`` and
            ``stderr`` in the run's directory (each trial's for a Tuner), a name writes both to
            that file, a pair ``(stdout_name, stderr_name)`` each to its own. The SDK writes them
            from the run's captured logs once the run has ended; a line keeps its rank prefix.

    ``storage_path`` may start with ``~`` (expanded here, on the client).
    """

    name: str | None = None
    storage_path: str | None = None
    stop: Any = None
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    sync_config: SyncConfig = field(default_factory=SyncConfig)
    verbose: int = 1
    local_dir: str | None = field(default=None, repr=False, compare=False)
    runtime_env: dict[str, Any] | None = None
    worker_runtime_env: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    callbacks: list[Any] | None = field(default=None, compare=False)
    logging_config: Any = None
    progress_reporter: Any = field(default=None, compare=False)
    log_to_file: bool | str | tuple[str, str] = False

    def __post_init__(self) -> None:
        if self.logging_config is not None and not isinstance(getattr(self.logging_config, "log_level", None), str):
            raise InvalidArgumentError(
                f"run_config.logging_config must be a LoggingConfig, got {self.logging_config!r}",
                field="run_config.logging_config",
            )
        log_file_names(self.log_to_file)  # checked here, used when the run has ended
        if self.sync_config is None:
            self.sync_config = SyncConfig()
        if self.worker_runtime_env is not None:
            if self.runtime_env is not None:
                raise InvalidArgumentError(
                    "give runtime_env or worker_runtime_env, not both", field="run_config.runtime_env"
                )
            self.runtime_env, self.worker_runtime_env = self.worker_runtime_env, None
        self.runtime_env = runtime_env_check(self.runtime_env) or None
        if isinstance(self.storage_path, os.PathLike):
            self.storage_path = os.fspath(self.storage_path)
        self._adopt_deprecated_dirs()
        if self.storage_path is not None and self.storage_path.startswith("~"):
            self.storage_path = os.path.expanduser(self.storage_path)
        if self.name is not None and (not self.name or "/" in self.name or len(self.name) > 200):
            raise InvalidArgumentError(
                f"run_config.name must be 1-200 characters without '/', got {self.name!r}",
                field="run_config.name",
            )
        if self.storage_path is not None:
            _check_storage_path(self.storage_path)
        if self.stop and not isinstance(self.stop, dict):
            from trainwire.tune.stopper import as_stopper  # trainwire.tune imports this module

            try:
                as_stopper(self.stop)
            except ValueError as exc:
                raise InvalidArgumentError(str(exc), field="run_config.stop") from None
        for key, value in (self.stop if isinstance(self.stop, dict) else {}).items():
            if not isinstance(value, int | float) or math.isnan(value):
                raise InvalidArgumentError(
                    f"run_config.stop[{key!r}] must be a number, got {value!r}", field="run_config.stop"
                )
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()

    def _adopt_deprecated_dirs(self) -> None:
        """Maps Ray 2.4's ``local_dir`` and ``SyncConfig.upload_dir`` to ``storage_path``."""
        upload_dir = self.sync_config.upload_dir
        if self.local_dir is not None:
            warnings.warn(
                "RunConfig(local_dir=...) is deprecated, as in Ray: use RunConfig(storage_path=...)",
                DeprecationWarning,
                stacklevel=4,
            )
        given = [(n, v) for n, v in (("storage_path", self.storage_path), ("sync_config.upload_dir", upload_dir)) if v]
        if len({v for _, v in given}) > 1:
            raise InvalidArgumentError(
                f"run_config.storage_path and run_config.sync_config.upload_dir disagree ({given}); set storage_path",
                field="run_config.storage_path",
            )
        if self.storage_path is None and upload_dir:
            # With both, Ray kept results in upload_dir (local_dir was only a local cache).
            self.storage_path = upload_dir
        elif self.storage_path is None and self.local_dir:
            # local_dir was a directory of the driver's machine: relative to where the script runs.
            self.storage_path = os.path.abspath(os.path.expanduser(self.local_dir))

    def to_proto(self) -> common_pb2.RunConfig:
        if self.stop and not isinstance(self.stop, dict):
            raise InvalidArgumentError(
                "a Stopper or stop function decides on a Tuner's trials: give it to the Tuner's RunConfig; "
                "a trainer's RunConfig takes a dict such as {'training_iteration': 10}",
                field="run_config.stop",
            )
        return common_pb2.RunConfig(
            name=self.name or "",
            storage_path=self.storage_path or "",
            stop=self.stop or {},
            failure_config=self.failure_config.to_proto(),
            checkpoint_config=self.checkpoint_config.to_proto(),
            sync_config=self.sync_config.to_proto(),
            log_level=self.logging_config.log_level.upper() if self.logging_config is not None else "",
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.RunConfig) -> RunConfig:
        if msg.storage_path:
            # Checked before construction: "~" means the caller's home, which a server cannot know.
            _check_storage_path(msg.storage_path)
        return cls(
            name=msg.name or None,
            storage_path=msg.storage_path or None,
            stop=dict(msg.stop) or None,
            failure_config=FailureConfig.from_proto(msg.failure_config),
            checkpoint_config=CheckpointConfig.from_proto(msg.checkpoint_config),
            sync_config=SyncConfig.from_proto(msg.sync_config),
        )


def log_file_names(log_to_file: bool | str | tuple[str, str]) -> tuple[str, str] | None:
    """The (stdout, stderr) file names ``RunConfig.log_to_file`` asks for, as Ray reads it; None: no files.

    Raises:
        InvalidArgumentError: Not a bool, a name or a pair of names; or a name that leaves the run's directory.
    """
    if log_to_file is False or log_to_file is None:
        return None
    if log_to_file is True:
        names: tuple[Any, ...] = ("stdout", "stderr")
    elif isinstance(log_to_file, str):
        names = (log_to_file, log_to_file)
    elif isinstance(log_to_file, list | tuple) and len(log_to_file) == 2:
        names = tuple(log_to_file)
    else:
        names = ()
    parts_ok = all(
        isinstance(n, str) and n and not n.startswith("/") and ".." not in n.replace("\\", "/").split("/")
        for n in names
    )
    if not names or not parts_ok:
        raise InvalidArgumentError(
            "run_config.log_to_file must be a bool, a file name or a (stdout, stderr) pair of names inside "
            f"the run's directory, got {log_to_file!r}",
            field="run_config.log_to_file",
        )
    return names[0], names[1]
