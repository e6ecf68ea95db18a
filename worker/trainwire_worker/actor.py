"""The Ray actor that runs one rank of a run, and what it runs there: a framework's worker half.

What a framework needs on a worker (its module and package) is its ``Framework`` declaration's.
Frameworks with worker code of their own (the declarative trainers, ``trainwire_worker.backends``)
register a ``WorkerBackend`` in the ``trainwire.worker_backends`` entry-point group; every other
framework runs the user's loop in a ``DataParallelBackend`` made from its declaration. The
coordinator's half (validation, rendezvous, environment) lives with the coordinator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import logging
import os
import posixpath
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any

import cloudpickle

from trainwire.checkpoint import Checkpoint
from trainwire.config import SyncConfig
from trainwire.train.session import set_session
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.frameworks import WORKER_BACKENDS_GROUP, Framework, get_framework, require_installed
from trainwire_core.storage import RETURN_VALUE_MAX_BYTES, RETURN_VALUE_NAME, Store
from trainwire_core.structs import merge_dicts, struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2, worker_reports_pb2
from trainwire_core.worker_runtime import WorkerRun
from trainwire_worker.artifacts import ArtifactSyncer
from trainwire_worker.log_capture import LogCapture, worker_shipper
from trainwire_worker.report_client import ReportStreamClient
from trainwire_worker.runtime_env import activated, prepare
from trainwire_worker.session import WorkerSession

# --- a framework's worker half -----------------------------------------------------------


class WorkerBackend:
    """What a worker runs for one framework: its declaration, and the training function.

    Subclasses implement ``train``; ``get_backend`` makes one for a framework.
    """

    def __init__(self, framework: Framework) -> None:
        self.framework = framework

    @property
    def name(self) -> str:
        return self.framework.name

    def check_installed(self) -> None:
        """Raises FrameworkNotInstalledError, with the install hint, when this host lacks the framework's module."""
        fw = self.framework
        if fw.module:
            require_installed(fw.module, fw.name, fw.package, fw.install)

    @staticmethod
    def train(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> None:
        """Runs on every worker, inside the session."""
        raise NotImplementedError


def load_entry_point(entry_point: str) -> Callable[..., Any]:
    """Imports ``package.module:function``."""
    module, sep, attr = entry_point.partition(":")
    if not sep or not module or not attr:
        raise InvalidArgumentError(
            f"entry point must look like 'package.module:function', got {entry_point!r}",
            field="data_parallel.train_loop.entry_point",
        )
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn  # type: ignore[return-value]


def load_train_loop(spec: coordinator_pb2.DataParallelSpec) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The user's loop and its config, from pickled bytes or an entry point."""
    source = spec.train_loop.WhichOneof("source")
    fn = cloudpickle.loads(spec.train_loop.pickled_function) if source == "pickled_function" else None
    if source == "entry_point":
        fn = load_entry_point(spec.train_loop.entry_point)
    if fn is None:
        raise InvalidArgumentError("data_parallel.train_loop is required", field="data_parallel.train_loop")
    if spec.pickled_train_loop_config:
        config = cloudpickle.loads(spec.pickled_train_loop_config)
    else:
        config = struct_to_dict(spec.train_loop_config)
    if spec.HasField("config_overrides"):  # a search trial's parameters
        config = merge_dicts(config or {}, struct_to_dict(spec.config_overrides))
    return fn, config


def run_train_loop(worker: TrainWorker, request: coordinator_pb2.FitRequest) -> Any:
    """Calls ``train_loop_per_worker(config)`` (or with no argument if it takes none); returns its return."""
    fn, config = load_train_loop(request.data_parallel)
    if inspect.signature(fn).parameters:
        return fn(config)
    return fn()


class DataParallelBackend(WorkerBackend):
    """Runs the user's loop on every worker, for any framework whose declaration is all it needs.

    Torch, TensorFlow, Horovod, JAX, HuggingFace and a bare DataParallelTrainer: the coordinator's
    half sets the framework up (process group, ``TF_CONFIG``, ...); here the loop runs.
    """

    train = staticmethod(run_train_loop)


@functools.cache
def backend_class(name: str) -> type[WorkerBackend]:
    """The class a distribution registered for framework ``name``; else the user's loop, run as it is."""
    found = entry_points(group=WORKER_BACKENDS_GROUP, name=name)
    return next(iter(found)).load() if found else DataParallelBackend


def get_backend(name: str, *, check_installed: bool = False) -> WorkerBackend:
    """The worker half of the framework declared as ``name``.

    Raises:
        InvalidArgumentError: Unknown framework (field ``framework``).
        FrameworkNotInstalledError: ``check_installed`` and its package is missing.
    """
    backend = backend_class(name)(get_framework(name))
    if check_installed:
        backend.check_installed()
    return backend


# --- the actor --------------------------------------------------------------------------

# The loggers RunConfig(logging_config=LoggingConfig(log_level=...)) sets on the workers, as Ray Train's.
TRAIN_LOGGERS = ("ray.train", "trainwire.train")


def apply_log_level(level: str) -> None:
    """Sets the workers' Train loggers to ``level`` (a ``logging`` name); empty leaves them as they are."""
    if level:
        for name in TRAIN_LOGGERS:
            logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def process_restored() -> Iterator[None]:
    """Runs the body, then puts the worker process back as it was: ``sys.path``, the working directory, the variables.

    The actors are pooled: what one run's loop (or its runtime environment) changed must not
    reach the next run on the same worker.
    """
    saved_path, saved_cwd, saved_env = list(sys.path), os.getcwd(), dict(os.environ)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        restore_environ(saved_env)
        sys.path[:] = saved_path


def restore_environ(saved: dict[str, str]) -> None:
    """Puts the process's variables back as ``saved``, touching only those that differ.

    Clearing the environment and filling it again would unset every variable for a moment, while
    Ray's and the libraries' own threads read them (``getenv``): they crash on what was freed.
    """
    for name in [name for name in os.environ if name not in saved]:
        del os.environ[name]
    for name, value in saved.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def write_return_value(store: Store, run_id: str, value: Any) -> None:
    """Pickles rank 0's loop return into the run's directory, where ``Result.return_value`` reads it.

    None is written too, so a value an earlier attempt left is never taken for this one's.

    Raises:
        ValueError: The value cannot be pickled, or its pickle exceeds RETURN_VALUE_MAX_BYTES.
    """
    try:
        data = cloudpickle.dumps(value)
    except Exception as exc:
        raise ValueError(f"train_loop_per_worker's return_value cannot be pickled: {exc}") from exc
    if len(data) > RETURN_VALUE_MAX_BYTES:
        raise ValueError(
            f"train_loop_per_worker's return_value is {len(data)} bytes pickled, over the limit of "
            f"{RETURN_VALUE_MAX_BYTES}: return something smaller (save large objects in a checkpoint)"
        )
    store.write_bytes(posixpath.join(store.run_dir(run_id), RETURN_VALUE_NAME), data)


def worker_error(rank: int, attempt: int, exc: BaseException) -> common_pb2.WorkerError:
    """Describes an exception raised on a worker, traceback included."""
    return common_pb2.WorkerError(
        world_rank=rank,
        attempt=attempt,
        exc_type=type(exc).__name__,
        message=str(exc),
        traceback="".join(traceback.format_exception(exc)),
    )


class TrainWorker:
    """One rank of a run: backend setup calls, then the training loop.

    Registered as the ``actor`` of the ``trainwire.worker_runtime`` entry points; the
    coordinator wraps it with ``ray.remote`` and places one per bundle of the run's
    placement group.
    """

    def __init__(self) -> None:
        # Backends keep per-process state here (process groups, trackers).
        self.state: dict[str, Any] = {}
        # The log shipper starts while the group is being set up, not in the first run.
        threading.Thread(target=worker_shipper, name="trainwire-log-shipper", daemon=True).start()

    def node_info(self) -> tuple[str, str, int]:
        """(Ray node id, node ip, pid) of this worker."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), os.getpid()

    def execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs ``fn(self, *args, **kwargs)`` here: how backends set a worker up."""
        return fn(self, *args, **kwargs)

    def check_framework(self, framework: str) -> None:
        """Fails at once, with the install hint, when this host lacks the framework's package."""
        get_backend(framework, check_installed=True)

    def run(self, spec: WorkerRun) -> bytes:
        """Runs the training function; returns a serialized WorkerError, or b"" on success.

        Every report has reached the coordinator when this returns.
        """
        train_fn = get_backend(spec.framework).train
        request = coordinator_pb2.FitRequest.FromString(spec.request_bytes)
        apply_log_level(request.run_config.log_level)
        context = spec.context
        trial_dir = os.path.join(
            tempfile.gettempdir(), "trainwire", context.run_id, f"rank_{context.world_rank}_attempt_{context.attempt}"
        )
        os.makedirs(trial_dir, exist_ok=True)
        context = dataclasses.replace(context, trial_dir=trial_dir)
        store = Store(spec.store_uri)
        sync_config = SyncConfig.from_proto(request.run_config.sync_config)
        # Without SyncConfig(sync_artifacts=True) there is nothing to sync.
        artifacts = (
            ArtifactSyncer(store, context.run_id, context.world_rank, trial_dir, sync_config)
            if sync_config.sync_artifacts
            else None
        )
        reports = ReportStreamClient(spec.coordinator_address, context.run_id, spec.report_secret, tls=spec.report_tls)
        reports.send(
            worker_reports_pb2.WorkerReport(
                run_id=context.run_id,
                attempt=context.attempt,
                world_rank=context.world_rank,
                hello=worker_reports_pb2.WorkerHello(world_size=context.world_size),
            )
        )
        session = WorkerSession(
            context=context,
            store=store,
            reports=reports,
            checkpoint=Checkpoint(spec.checkpoint_uri) if spec.checkpoint_uri else None,
            dataset_shards=spec.dataset_shards,
            next_report_index=spec.next_report_index,
            artifacts=artifacts,
        )
        set_session(session)
        if artifacts is not None:
            artifacts.start()
        error = b""

        def status(reason: str) -> None:
            reports.send(
                worker_reports_pb2.WorkerReport(
                    run_id=context.run_id,
                    attempt=context.attempt,
                    world_rank=context.world_rank,
                    status=worker_reports_pb2.WorkerStatus(reason=reason),
                )
            )

        try:
            capture = LogCapture(store, context.run_id, context.world_rank, context.attempt, spec.log_max_bytes)
            with capture:
                # A run without a runtime environment has nothing to prepare or activate.
                prepared = (
                    prepare(store, request.run_config.runtime_env, status)
                    if request.run_config.HasField("runtime_env")
                    else None
                )
                with process_restored(), activated(prepared) if prepared is not None else contextlib.nullcontext():
                    value = train_fn(self, request)
            if context.world_rank == 0:
                write_return_value(store, context.run_id, value)
        except BaseException as exc:  # noqa: BLE001 - reported with rank and traceback
            err = worker_error(context.world_rank, context.attempt, exc)
            reports.send(
                worker_reports_pb2.WorkerReport(
                    run_id=context.run_id, attempt=context.attempt, world_rank=context.world_rank, error=err
                )
            )
            error = err.SerializeToString()
        finally:
            set_session(None)
            session.close()
            if artifacts is not None:
                artifacts.close()
            reports.close()
        return error
