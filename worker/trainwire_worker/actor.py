"""The Ray actor that runs one rank of a run."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from trainwire.checkpoint import Checkpoint
from trainwire.config import SyncConfig
from trainwire.train.session import set_session
from trainwire_core.storage import RETURN_VALUE_MAX_BYTES, RETURN_VALUE_NAME, Store
from trainwire_core.v1 import common_pb2, coordinator_pb2, worker_reports_pb2
from trainwire_core.worker_runtime import WorkerRun
from trainwire_worker.artifacts import ArtifactSyncer
from trainwire_worker.backends import get_backend
from trainwire_worker.backends.base import free_port
from trainwire_worker.log_capture import LogCapture, worker_shipper
from trainwire_worker.report_client import ReportStreamClient
from trainwire_worker.runtime_env import activated, prepare
from trainwire_worker.session import WorkerSession

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
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path


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
        # A plain function, not an actor method: a backend's set-up calls it without coming back
        # through the actor (Ray wraps each method of an actor class).
        self.free_port: Callable[[], int] = free_port
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
