"""``ray.air.integrations.mlflow``: log a run's params, metrics and model to MLflow.

``MLflowLoggerCallback`` runs in the program that calls ``fit()``, fed by the run's events;
``setup_mlflow`` runs inside the training loop, as Ray's. For every run of a coordinator
without changing scripts, set the coordinator's ``mlflow_uri`` instead.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from trainwire.air.integrations import _tracking
from trainwire.callbacks import RunCallback

if TYPE_CHECKING:
    from trainwire.result import Result
    from trainwire_core.v1 import coordinator_pb2

ARTIFACT_PATH = "checkpoint"


def _experiment_id(client: Any, name: str | None, experiment_id: str | None = None, create: bool = True) -> str:
    """The id of experiment ``name`` (created when missing), or MLflow's default experiment."""
    if experiment_id:
        return experiment_id
    name = name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not name:
        return os.environ.get("MLFLOW_EXPERIMENT_ID", "0")
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    if not create:
        raise ValueError(f"MLflow has no experiment {name!r} (create_experiment_if_not_exists=False)")
    return client.create_experiment(name)


def log_params(client: Any, mlflow_run_id: str, config: dict[str, Any]) -> None:
    from mlflow.entities import Param

    params = [Param(k, v) for k, v in _tracking.params(config).items()]
    for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
        client.log_batch(mlflow_run_id, params=params[i : i + 100])


def log_metrics(client: Any, mlflow_run_id: str, metrics: dict[str, Any], step: int) -> None:
    from mlflow.entities import Metric

    now_ms = int(time.time() * 1000)
    batch = [Metric(k, v, now_ms, step) for k, v in _tracking.numeric_metrics(metrics).items()]
    for i in range(0, len(batch), 1000):
        client.log_batch(mlflow_run_id, metrics=batch[i : i + 1000])


class MLflowLoggerCallback(RunCallback):
    """Logs each run to MLflow, as Ray's ``MLflowLoggerCallback``.

    Args:
        tracking_uri: The tracking server (``http://host:port``, ``sqlite:///...``); default:
            ``MLFLOW_TRACKING_URI`` or MLflow's own default.
        registry_uri: The model registry's URI (default: the tracking URI).
        experiment_name: The experiment the runs go in (created when missing); default:
            ``MLFLOW_EXPERIMENT_NAME``, else MLflow's default experiment.
        tags: Tags set on every run.
        tracking_token: A token for the tracking server (``MLFLOW_TRACKING_TOKEN``).
        save_artifact: Log the run's best (else latest) checkpoint's files as the ``checkpoint`` artifact.
        log_params_on_trial_end: Log the params when the run ends instead of when it starts.
        log_system_metrics: Log this machine's CPU, memory, disk, network (and GPU) use while
            the run lasts as the ``system/`` metrics: MLflow's own monitor (``psutil``), as
            ``mlflow.start_run(log_system_metrics=True)``; its sampling interval is
            ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` (default 10 s). The machine is the one
            that calls ``fit()``, not the workers'.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        registry_uri: str | None = None,
        experiment_name: str | None = None,
        tags: dict[str, Any] | None = None,
        tracking_token: str | None = None,
        save_artifact: bool = False,
        log_params_on_trial_end: bool = False,
        log_system_metrics: bool = False,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.registry_uri = registry_uri
        self.experiment_name = experiment_name
        self.tags = {k: str(v) for k, v in (tags or {}).items()}
        self.tracking_token = tracking_token
        self.save_artifact = save_artifact
        self.log_params_on_trial_end = log_params_on_trial_end
        self.log_system_metrics = log_system_metrics
        self.client: Any = None
        self._system_metrics: Any = None
        self.mlflow_run_id = ""
        self._config: dict[str, Any] = {}
        self._reports = 0

    def on_run_start(self, run: coordinator_pb2.RunInfo, config: dict[str, Any]) -> None:
        from mlflow import MlflowClient

        if self.tracking_token:
            os.environ["MLFLOW_TRACKING_TOKEN"] = self.tracking_token
        self.client = MlflowClient(self.tracking_uri, self.registry_uri)
        experiment_id = _experiment_id(self.client, self.experiment_name)
        tags = {"trainwire.run_id": run.run_id, **self.tags}
        self.mlflow_run_id = self.client.create_run(experiment_id, tags=tags, run_name=run.name).info.run_id
        self._config, self._reports = dict(config), 0
        if not self.log_params_on_trial_end:
            log_params(self.client, self.mlflow_run_id, self._config)
        if self.log_system_metrics:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            # What mlflow.start_run(log_system_metrics=True) starts, for a run made by the client.
            self._system_metrics = SystemMetricsMonitor(self.mlflow_run_id, tracking_uri=self.client.tracking_uri)
            self._system_metrics.start()

    def on_metrics(self, run: coordinator_pb2.RunInfo, metrics: dict[str, Any]) -> None:
        if not self.mlflow_run_id:
            return
        self._reports += 1
        log_metrics(self.client, self.mlflow_run_id, metrics, _tracking.step_of(metrics, self._reports))

    def on_run_end(self, run: coordinator_pb2.RunInfo, result: Result) -> None:
        if not self.mlflow_run_id:
            return
        try:
            if self._system_metrics is not None:
                # Stopped (its last samples written) while the MLflow run still takes metrics.
                self._system_metrics.finish()
                self._system_metrics = None
            if self.log_params_on_trial_end:
                log_params(self.client, self.mlflow_run_id, self._config)
            checkpoint = _tracking.model_checkpoint(result) if self.save_artifact else None
            if checkpoint is not None:
                with checkpoint.as_directory() as directory:
                    self.client.log_artifacts(self.mlflow_run_id, directory, ARTIFACT_PATH)
        finally:
            self.client.set_terminated(self.mlflow_run_id, _tracking.mlflow_status(result.state))


class _NoMlflow:
    """What ``setup_mlflow`` gives ranks other than 0: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def setup_mlflow(
    config: dict[str, Any] | None = None,
    tracking_uri: str | None = None,
    registry_uri: str | None = None,
    experiment_id: str | None = None,
    experiment_name: str | None = None,
    tracking_token: str | None = None,
    artifact_location: str | None = None,
    run_name: str | None = None,
    create_experiment_if_not_exists: bool = False,
    tags: dict[str, Any] | None = None,
    rank_zero_only: bool = True,
) -> Any:
    """Inside a training loop: starts an MLflow run and returns the ``mlflow`` module, as Ray's.

    Rank 0 (every rank, with ``rank_zero_only=False``) logs ``config`` as params; the others
    get an object whose calls do nothing, so the loop calls ``mlflow.log_metrics`` on any rank.
    """
    from trainwire import train

    context = train.get_context()
    if rank_zero_only and context.get_world_rank() != 0:
        return _NoMlflow()
    import mlflow

    if tracking_token:
        os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    if registry_uri:
        mlflow.set_registry_uri(registry_uri)
    client = mlflow.MlflowClient(tracking_uri, registry_uri)
    name = experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not experiment_id and name and client.get_experiment_by_name(name) is None and create_experiment_if_not_exists:
        client.create_experiment(name, artifact_location=artifact_location)
    mlflow.set_experiment(experiment_id=_experiment_id(client, name, experiment_id, create=False))
    mlflow.start_run(run_name=run_name or context.get_trial_name(), tags=tags)
    if config:
        mlflow.log_params(_tracking.params(config))
    return mlflow
