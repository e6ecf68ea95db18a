"""Trainers: build a FitRequest, start the run, watch it, return a Result."""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import cloudpickle
import pandas as pd
import pyarrow as pa

from trainwire import runtime_env, session_client
from trainwire.callbacks import RunCallback, dispatch
from trainwire.checkpoint import Checkpoint
from trainwire.client import TERMINAL_STATES, CoordinatorClient, format_log_line
from trainwire.config import RunConfig, ScalingConfig
from trainwire.data_config import DataConfig
from trainwire.progress import RunProgress
from trainwire.result import Result
from trainwire.session_client import get_client
from trainwire.session_client import settings as session_settings
from trainwire.train.v2 import UserCallback, ValidationConfig
from trainwire.train.v2.api.exceptions import failed_run_error
from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_core.structs import struct_to_dict, to_struct
from trainwire_core.v1 import common_pb2, coordinator_pb2

DatasetLike = pd.DataFrame | pa.Table | str


class WorkerOutput:
    """Prints the workers' lines while a run goes on (``log_to_driver``), from a thread of its own."""

    def __init__(self, client: CoordinatorClient, run_id: str) -> None:
        self.client, self.run_id = client, run_id
        self.thread = threading.Thread(target=self._follow, name=f"trainwire-logs-{run_id}", daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        try:
            for line in self.client.watch_logs(self.run_id, follow=True):
                print(format_log_line(line), file=sys.stderr if line.stream == "stderr" else sys.stdout, flush=True)
        except TrainwireError:
            pass  # the run's own outcome says what went wrong

    def join(self, timeout_s: float = 20.0) -> None:
        """Waits for the last lines (the stream ends once every rank's output has ended)."""
        self.thread.join(timeout_s)


class BaseTrainer:
    """Common parts of every trainer, as ``ray.train.base_trainer.BaseTrainer``.

    Args:
        scaling_config: Workers and resources.
        run_config: Name, checkpoint and failure policies.
        datasets: Name -> pandas DataFrame, Arrow table, or parquet/csv URI.
        resume_from_checkpoint: Start from this checkpoint (its URI must be in a store the workers read).
        preprocessor: A Ray Data preprocessor applied before training.
        metadata: Free-form JSON metadata recorded with the run.
    """

    framework = ""
    checkpoint_cls: type[Checkpoint] = Checkpoint

    def __init__(
        self,
        *,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, DatasetLike] | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        preprocessor: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.scaling_config = ScalingConfig.coerce(scaling_config or ScalingConfig())
        self.run_config = run_config or RunConfig()
        self.datasets = datasets or {}
        self.resume_from_checkpoint = resume_from_checkpoint
        self.preprocessor = preprocessor
        self.metadata = metadata or {}
        if not isinstance(self.run_config, RunConfig):
            raise InvalidArgumentError("run_config must be a RunConfig", field="run_config")

    # --- request building ------------------------------------------------------
    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        raise NotImplementedError

    def _code_objects(self) -> list[Any]:
        """What is pickled for the workers: the local modules it imports travel with the run."""
        return [self.preprocessor] if self.preprocessor is not None else []

    def _total_iterations(self) -> int | None:
        return None

    def _dataset_ref(self, client: CoordinatorClient, name: str, data: Any) -> coordinator_pb2.DatasetRef:
        if isinstance(data, str):
            return coordinator_pb2.DatasetRef(uri=data)
        if isinstance(data, pd.DataFrame):
            data = pa.Table.from_pandas(data, preserve_index=False)
        elif hasattr(data, "to_arrow_refs"):  # a ray.data.Dataset
            import ray

            data = pa.concat_tables(ray.get(data.to_arrow_refs()))
        if not isinstance(data, pa.Table):
            raise InvalidArgumentError(
                f"datasets[{name!r}] must be a pandas DataFrame, an Arrow table or a URI, got {type(data).__name__}",
                field=f"datasets[{name}]",
            )
        return client.upload_table(data).ref

    @staticmethod
    def _checkpoint_uri(client: CoordinatorClient, checkpoint: Checkpoint) -> str:
        """A URI the workers can read: a local checkpoint is uploaded, except to this program's embedded coordinator.

        Any other coordinator reads only its store and the prefixes its operator allows, even on loopback; a
        checkpoint a run reported (a Result's) is in the store already.
        """
        if not checkpoint.is_local or checkpoint._committed or session_client.is_embedded(client.address):
            return checkpoint.uri
        with checkpoint.as_directory() as d:
            return client.upload_checkpoint(d, run_name="uploaded-checkpoints").uri

    def build_request(self, client: CoordinatorClient) -> coordinator_pb2.FitRequest:
        request = coordinator_pb2.FitRequest(
            framework=self.framework,
            scaling_config=self.scaling_config.to_proto(),
            run_config=self.run_config.to_proto(),
            metadata=to_struct(self.metadata, "metadata"),
        )
        for name, data in self.datasets.items():
            request.datasets[name].CopyFrom(self._dataset_ref(client, name, data))
        if self.resume_from_checkpoint is not None:
            request.resume_from_checkpoint = self._checkpoint_uri(client, self.resume_from_checkpoint)
        if self.preprocessor is not None:
            request.pickled_preprocessor = runtime_env.pickle_by_value(self.preprocessor)
        self._fill_spec(request)
        env = runtime_env.build(
            self.run_config.runtime_env if self.run_config.runtime_env is not None else session_settings["runtime_env"],
            client,
            self._code_objects(),
            verbose=bool(self.run_config.verbose),
        )
        if env is not None:
            request.run_config.runtime_env.CopyFrom(env)
        return request

    # --- running -----------------------------------------------------------------
    def _callbacks(self) -> list[RunCallback]:
        callbacks = list(self.run_config.callbacks or [])
        for i, callback in enumerate(callbacks):
            if not isinstance(callback, RunCallback):
                raise InvalidArgumentError(
                    f"run_config.callbacks[{i}] must be a trainwire.callbacks.RunCallback,"
                    f" got {type(callback).__name__}",
                    field=f"run_config.callbacks[{i}]",
                )
        return callbacks

    def _tracked_config(self) -> dict[str, Any]:
        """The parameters a tracker logs for the run: the loop's config or the model's params, and the scaling."""
        config: dict[str, Any] = {}
        for name in ("train_loop_config", "params", "estimator_params"):
            value = getattr(self, name, None)
            if isinstance(value, dict):
                config.update(value)
        config["num_workers"] = self.scaling_config.num_workers
        return config

    def fit(self) -> Result:
        """Runs training to the end and returns its Result.

        Raises:
            TrainingFailedError: The run failed or was cancelled; ``.result`` holds the details
                (a WorkerGroupError when a worker raised, else a ControllerError, as Ray's).
        """
        if self.scaling_config.local_mode:
            from trainwire.train.local import run_local

            return run_local(self)
        client = get_client()
        callbacks = self._callbacks()
        user = [c for c in callbacks if isinstance(c, UserCallback)]
        run = client.fit(self.build_request(client))
        # A fit with no callbacks (or verbose=0: no progress display) never enters their modules.
        if callbacks:
            dispatch(callbacks, "on_run_start", run, self._tracked_config())
        history: list[dict[str, Any]] = []
        logs = WorkerOutput(client, run.run_id) if session_settings["log_to_driver"] else None
        progress = RunProgress(run.name, self._total_iterations()) if self.run_config.verbose else None
        with progress or contextlib.nullcontext():
            for event in client.watch_run(run.run_id):
                kind = event.WhichOneof("kind")
                if kind == "metrics":
                    metrics = struct_to_dict(event.metrics.metrics)
                    history.append(metrics)
                    if progress is not None:
                        progress.metrics(metrics)
                    if callbacks:
                        dispatch(callbacks, "on_metrics", run, metrics)
                    if user:
                        dispatch(user, "_on_report", run, event.metrics.report_index, metrics)
                elif kind == "checkpoint":
                    if callbacks:
                        dispatch(callbacks, "on_checkpoint", run, event.checkpoint)
                elif kind == "worker_error":
                    if callbacks:
                        dispatch(callbacks, "on_worker_error", run, event.worker_error)
                elif kind == "state_change":
                    state = common_pb2.RunState.Name(event.state_change.state)
                    if progress is not None:
                        progress.state(state, event.state_change.reason)
                    if callbacks:
                        dispatch(callbacks, "on_state", run, state, event.state_change.reason)
                    if event.state_change.state in TERMINAL_STATES:
                        break
        if logs is not None:
            logs.join()
        run = client.get_run(run.run_id)
        result = Result.from_run(run, history, self.checkpoint_cls)
        if self.run_config.log_to_file:
            from trainwire.train.log_files import write_log_files

            write_log_files(client, run.run_id, run.path, self.run_config.log_to_file)
        if callbacks:
            dispatch(callbacks, "on_run_end", run, result)
        if run.state != common_pb2.SUCCEEDED:
            detail = str(result.error) if result.error else run.state_reason
            raise failed_run_error(f"run {run.name!r} ({run.run_id}) ended {result.state}: {detail}", result)
        return result


class DataParallelTrainer(BaseTrainer):
    """Runs ``train_loop_per_worker`` on every worker, as ``ray.train.DataParallelTrainer``.

    Used as it is, the loop runs with no framework set up (no process group); the
    framework trainers (``TorchTrainer``, ...) add theirs.

    Args:
        train_loop_per_worker: A function taking ``config`` (or nothing), or an
            entry point ``"package.module:function"`` installed on the workers.
        train_loop_config: Passed to the loop.
        backend_config: Framework options (e.g. torch ``{"backend": "gloo"}``).
        dataset_config: Which datasets are split across the workers (``DataConfig``; default: ``train``).
        validation_config: Ray Train V2's asynchronous validation (``ValidationConfig(fn)``):
            ``train.report(..., validation=True)`` runs ``fn`` on that checkpoint beside the loop.
    """

    framework = "data_parallel"

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str,
        *,
        train_loop_config: dict[str, Any] | None = None,
        backend_config: dict[str, Any] | None = None,
        dataset_config: DataConfig | dict[str, Any] | None = None,
        validation_config: ValidationConfig | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if validation_config is not None and not isinstance(validation_config, ValidationConfig):
            raise InvalidArgumentError(
                "validation_config must be a trainwire.train.ValidationConfig", field="validation_config"
            )
        if validation_config is not None and not callable(train_loop_per_worker):
            raise InvalidArgumentError(
                "validation_config needs train_loop_per_worker as a function (not an entry point)",
                field="validation_config",
            )
        self.validation_config = validation_config
        self.dataset_config = DataConfig.coerce(dataset_config) if dataset_config is not None else None
        if not (callable(train_loop_per_worker) or isinstance(train_loop_per_worker, str)):
            raise InvalidArgumentError(
                "train_loop_per_worker must be a function or 'package.module:function'",
                field="data_parallel.train_loop",
            )
        if callable(train_loop_per_worker) and len(inspect.signature(train_loop_per_worker).parameters) > 1:
            raise InvalidArgumentError(
                "train_loop_per_worker must take one argument (config) or none",
                field="data_parallel.train_loop",
            )
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config or {}

    def _code_objects(self) -> list[Any]:
        code = [self.train_loop_per_worker, self.train_loop_config] if callable(self.train_loop_per_worker) else []
        if self.validation_config is not None:
            code.append(self.validation_config.fn)
        return code + super()._code_objects()

    def _loop_for_workers(self) -> Callable[..., Any]:
        """The loop the workers run: with a ValidationConfig, one that hands it to the session first."""
        loop = self.train_loop_per_worker
        if self.validation_config is None:
            return loop
        return with_validation(loop, self.validation_config)

    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        spec = request.data_parallel
        if isinstance(self.train_loop_per_worker, str):
            spec.train_loop.entry_point = self.train_loop_per_worker
        else:
            spec.train_loop.pickled_function = runtime_env.pickle_by_value(self._loop_for_workers())
        if self.train_loop_config is not None:
            spec.pickled_train_loop_config = cloudpickle.dumps(self.train_loop_config)
        spec.backend_config.CopyFrom(to_struct(self.backend_config, "data_parallel.backend_config"))
        if self.dataset_config is not None:  # else the coordinator's default: "train" only
            spec.data_config.CopyFrom(self.dataset_config.to_proto())


def with_validation(loop: Callable[..., Any], validation: ValidationConfig) -> Callable[..., Any]:
    """``loop`` with the session told of ``validation`` before it starts (same arity as ``loop``)."""
    from trainwire.train.session import get_session

    if inspect.signature(loop).parameters:

        def validated_loop(config: Any) -> Any:
            get_session().set_validation(validation)
            return loop(config)

    else:

        def validated_loop() -> Any:  # type: ignore[misc]
            get_session().set_validation(validation)
            return loop()

    validated_loop.__module__ = getattr(loop, "__module__", __name__)
    return validated_loop
