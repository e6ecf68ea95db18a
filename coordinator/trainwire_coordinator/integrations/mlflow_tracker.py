"""The coordinator's own experiment tracking: every run logged to MLflow (setting ``mlflow_uri``).

The tracker watches the event log (``EventLog.observers``, the one place every run event
passes). ``observe`` runs on the event loop and only puts the event on a bounded queue; one
thread of the tracker's own makes the MLflow calls (blocking HTTP). When MLflow is slow or
down, the queue fills and further events are dropped with a warning: a run never waits for
its tracker, and no MLflow error reaches it.

What a run logs (the same names and steps as the SDK's ``MLflowLoggerCallback``):

- the MLflow run: named as the run, tagged ``trainwire.run_id`` (a coordinator that takes a
  run over carries on the same MLflow run), in the experiment ``MLFLOW_EXPERIMENT_NAME`` or
  ``trainwire``;
- params: the request's plain-data config only (``train_loop_config`` when sent as data,
  GBDT ``params``, estimator params, RL config, backend options, ``num_workers``); pickled
  values are never unpickled here: a pickled ``train_loop_config`` is skipped (tag
  ``trainwire.skipped_params``);
- every reported metric (numbers; nested ones flattened) at its step (``training_iteration``,
  else the report's index);
- at the end: the terminal status, the best (else latest) checkpoint's URI as the tag
  ``trainwire.best_checkpoint``, and its files as the run's artifact ``checkpoint/`` (read from
  the store: a local one in place, a remote one through a temporary directory; checked against
  the checkpoint's manifest; bytes copied, nothing unpickled). A checkpoint over
  ``max_artifact_bytes`` keeps the tag only (``trainwire.artifact_skipped`` says why).

The coordinator's ``ModelRegistry`` tells ``observe_alias`` of each alias move; the same thread
mirrors it in MLflow's model registry: a registered model of the trainwire model's name, one
model version per checkpoint (tags ``trainwire.run_id``, ``trainwire.checkpoint_id``) whose
source is the checkpoint's artifact in its run's MLflow run (``checkpoint/`` when it holds that
checkpoint, else uploaded as ``checkpoints/<checkpoint id>/``; the store URI when the run has
no MLflow run or the checkpoint is too big), and the alias set on it or deleted.
"""

from __future__ import annotations

import logging
import os
import posixpath
import queue
import tempfile
import threading
import time
from collections.abc import Iterable
from typing import Any

import pyarrow.fs as pafs
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from trainwire.air.integrations import _tracking
from trainwire.air.integrations.mlflow import log_params
from trainwire_coordinator.execution.run_state import TERMINAL
from trainwire_coordinator.integrations.model_registry import AliasChange
from trainwire_coordinator.metadata import MetadataStore
from trainwire_core.errors import DataLossError
from trainwire_core.manifest import is_derived_path, verify_checkpoint
from trainwire_core.storage import RANK_STAGING_PREFIX, Store, resolve
from trainwire_core.structs import merge_dicts, struct_to_dict
from trainwire_core.v1 import common_pb2, coordinator_pb2

logger = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "trainwire"
RUN_ID_TAG = "trainwire.run_id"
BEST_CHECKPOINT_TAG = "trainwire.best_checkpoint"
SKIPPED_TAG = "trainwire.skipped_params"
# Which checkpoint the artifact ``checkpoint/`` holds, or why none was uploaded.
ARTIFACT_PATH = "checkpoint"
ARTIFACT_CHECKPOINT_TAG = "trainwire.artifact_checkpoint_id"
ARTIFACT_SKIPPED_TAG = "trainwire.artifact_skipped"
# Where a checkpoint an alias points to, other than the one in ``checkpoint/``, is uploaded.
ALIASED_ARTIFACT_DIR = "checkpoints"
CHECKPOINT_ID_TAG = "trainwire.checkpoint_id"
CHECKPOINT_URI_TAG = "trainwire.checkpoint_uri"
DEFAULT_MAX_ARTIFACT_BYTES = 1024 * 1024 * 1024
# Each trainer's field that holds the config its params come from (logged by their own names).
CONFIG_FIELDS = {"data_parallel": "train_loop_config", "gbdt": "params", "sklearn": "estimator_params"}
MAX_QUEUED_EVENTS = 10_000
# Events taken off the queue at once: consecutive reports of a run go to MLflow in one batch.
BATCH_EVENTS = 500
# How long the end of a run waits for its record to say so (the state event is written first).
RECORD_WAIT_S = 10.0

_STOP = object()


def _without_bytes(message: Any) -> Any:
    """A copy of ``message`` with every bytes field cleared (pickled code and values), nested ones too."""
    out = type(message)()
    out.CopyFrom(message)
    _clear_bytes(out)
    return out


def _clear_bytes(message: Any) -> None:
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_BYTES:
            message.ClearField(field.name)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue  # maps of plain values (resources_per_worker)
            for item in value if field.is_repeated else [value]:
                _clear_bytes(item)


def run_params(request: coordinator_pb2.FitRequest) -> tuple[dict[str, Any], list[str]]:
    """The plain-data params of a run's request, and the names of the pickled values left out.

    The trainer's config (``train_loop_config``, ``params``, ``estimator_params``) is logged by
    its own keys, as the SDK's callbacks log it; the spec's other fields under ``<trainer>/``.
    """
    params: dict[str, Any] = {}
    skipped: list[str] = []
    which = request.WhichOneof("trainer")
    if which:
        spec = getattr(request, which)
        skipped = [f.name for f, _ in spec.ListFields() if f.type == FieldDescriptor.TYPE_BYTES]
        if which == "data_parallel" and spec.train_loop.WhichOneof("source") == "pickled_function":
            skipped.append("train_loop.pickled_function")
        plain = json_format.MessageToDict(_without_bytes(spec), preserving_proto_field_name=True)
        plain = _whole_numbers(plain)
        config_field = CONFIG_FIELDS.get(which)
        config = plain.pop(config_field, {}) if config_field else {}
        if which == "data_parallel":
            overrides = plain.pop("config_overrides", {})
            # A pickled config wins over train_loop_config on the workers: the struct is not what
            # the run used, and the pickle is not opened here.
            config = {} if spec.pickled_train_loop_config else merge_dicts(config, overrides)
        params.update(config)
        params.update({f"{which}/{k}": v for k, v in plain.items()})
    params["num_workers"] = request.scaling_config.num_workers
    return params, sorted(skipped)


def _whole_numbers(value: Any) -> Any:
    """MessageToDict's numbers as ints where whole (a Struct keeps only doubles), as the SDK reads them."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


class MlflowTracker:
    """Logs every run whose events pass ``observe`` to the MLflow tracking server at ``uri``.

    Args:
        uri: The tracking server (``http://host:port``) or any MLflow tracking URI.
        metadata: Where the runs' records are read (name, request, checkpoints), off the event loop.
        experiment_name: The MLflow experiment (created when missing); default:
            ``MLFLOW_EXPERIMENT_NAME``, else ``trainwire``.
        max_queued_events: Events kept while MLflow is slow; beyond them events are dropped.
        max_artifact_bytes: The largest checkpoint (all its files) uploaded as an artifact.
    """

    def __init__(
        self,
        uri: str,
        metadata: MetadataStore,
        *,
        experiment_name: str | None = None,
        max_queued_events: int = MAX_QUEUED_EVENTS,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    ) -> None:
        self.uri = uri
        self.max_artifact_bytes = max_artifact_bytes
        self.metadata = metadata
        self.experiment_name = experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        self.dropped = 0
        self._queue: queue.Queue[Any] = queue.Queue(max_queued_events)
        self._client: Any = None
        self._experiment_id = ""
        # trainwire run id -> MLflow run id, of the runs under way (the tracker thread's alone).
        self._runs: dict[str, str] = {}
        self._thread = threading.Thread(target=self._work, name="trainwire-mlflow", daemon=True)
        self._thread.start()

    # --- on the event loop -------------------------------------------------------------
    def observe(self, event: coordinator_pb2.RunEvent) -> None:
        """Queues ``event`` for MLflow; never blocks (a full queue drops it, with a warning)."""
        self._put(event)

    def observe_alias(self, change: AliasChange) -> None:
        """Queues an alias move for MLflow's model registry (a ``ModelRegistry`` observer); never blocks."""
        self._put(change)

    def _put(self, item: Any) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning("MLflow at %s is behind: %d run event(s) not logged", self.uri, self.dropped)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Waits until what was queued before the call is logged; False after ``timeout_s``; blocking."""
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout_s)
        except queue.Full:
            return False
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Logs what is queued (for at most ``timeout_s``), then stops the thread; blocking."""
        deadline = time.monotonic() + timeout_s
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            logger.warning("MLflow at %s is behind: stopping with %d event(s) queued", self.uri, self._queue.qsize())
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))

    # --- on the tracker's thread ---------------------------------------------------------
    def _work(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < BATCH_EVENTS:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in batch)
            self._process([e for e in batch if e is not _STOP])
            if stop:
                return

    def _process(self, events: Iterable[Any]) -> None:
        """Logs ``events`` in order; a run's consecutive reports go in one batch."""
        pending: dict[str, list[coordinator_pb2.RunEvent]] = {}
        for event in events:
            if isinstance(event, threading.Event):  # a flush: what came before it is logged first
                for run_id, reports in pending.items():
                    self._guarded(self._log_metrics, run_id, reports)
                pending.clear()
                event.set()
                continue
            if isinstance(event, AliasChange):
                self._guarded(self._mirror_alias, event)
                continue
            if event.WhichOneof("kind") == "metrics":
                pending.setdefault(event.run_id, []).append(event)
                continue
            if event.run_id in pending:
                self._guarded(self._log_metrics, event.run_id, pending.pop(event.run_id))
            self._guarded(self._on_event, event)
        for run_id, reports in pending.items():
            self._guarded(self._log_metrics, run_id, reports)

    def _guarded(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # MLflow down, refusing a value...: the run goes on untracked
            what = args[0]
            if isinstance(what, AliasChange):
                what = f"{what.run_id} (alias {what.alias!r} of model {what.model!r})"
            logger.exception("trainwire: logging run %s to MLflow at %s failed", what, self.uri)

    def _mlflow(self) -> Any:
        if self._client is None:
            from mlflow import MlflowClient

            client = MlflowClient(self.uri)
            found = client.get_experiment_by_name(self.experiment_name)
            self._experiment_id = found.experiment_id if found else client.create_experiment(self.experiment_name)
            self._client = client
        return self._client

    def _run(self, run_id: str) -> coordinator_pb2.Run | None:
        record = self.metadata.get_run(run_id)
        return coordinator_pb2.Run.FromString(record.data) if record is not None else None

    def _find_mlflow_run(self, run_id: str) -> Any:
        """The newest MLflow run tagged with trainwire run ``run_id``, or None."""
        found = self._mlflow().search_runs(
            [self._experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1, order_by=["start_time DESC"]
        )
        return found[0] if found else None

    def _mlflow_run(self, run_id: str) -> str:
        """The MLflow run of ``run_id``: started on the run's first event (carried on when one exists)."""
        if run_id in self._runs:
            return self._runs[run_id]
        client = self._mlflow()
        found = self._find_mlflow_run(run_id)
        if found is not None:  # another coordinator (or this one before a restart) started it
            self._runs[run_id] = found.info.run_id
            return self._runs[run_id]
        run = self._run(run_id)
        if run is None:
            raise LookupError(f"the metadata store has no run {run_id}")
        params, skipped = run_params(run.request)
        tags = {RUN_ID_TAG: run_id, "trainwire.framework": run.framework, "trainwire.path": run.path}
        if run.submitted_by:
            tags["trainwire.submitted_by"] = run.submitted_by
        if run.tune_id:
            tags["trainwire.tune_id"] = run.tune_id
        if skipped:
            tags[SKIPPED_TAG] = ",".join(skipped)
        mlflow_run_id = client.create_run(self._experiment_id, tags=tags, run_name=run.name or run_id).info.run_id
        self._runs[run_id] = mlflow_run_id
        log_params(client, mlflow_run_id, params)
        return mlflow_run_id

    def _log_metrics(self, run_id: str, reports: list[coordinator_pb2.RunEvent]) -> None:
        from mlflow.entities import Metric

        mlflow_run_id = self._mlflow_run(run_id)
        batch = []
        for event in reports:
            metrics = struct_to_dict(event.metrics.metrics)
            step = _tracking.step_of(metrics, int(event.metrics.report_index))
            at_ms = event.time.ToMilliseconds() or int(time.time() * 1000)
            batch += [Metric(k, v, at_ms, step) for k, v in _tracking.numeric_metrics(metrics).items()]
        for i in range(0, len(batch), 1000):  # MLflow takes at most 1000 metrics a batch
            self._client.log_batch(mlflow_run_id, metrics=batch[i : i + 1000])

    def _on_event(self, event: coordinator_pb2.RunEvent) -> None:
        if event.WhichOneof("kind") != "state_change":
            return
        state = event.state_change.state
        if state not in TERMINAL:
            self._mlflow_run(event.run_id)  # the MLflow run starts with the trainwire run
            return
        mlflow_run_id = self._mlflow_run(event.run_id)
        try:
            run = self._final_record(event.run_id)
            best = None
            if run is not None:
                best = run.best_checkpoints[0] if run.best_checkpoints else None
                if best is None and run.HasField("latest_checkpoint"):
                    best = run.latest_checkpoint
            if best is not None and best.uri:
                self._client.set_tag(mlflow_run_id, BEST_CHECKPOINT_TAG, best.uri)
                self._client.set_tag(mlflow_run_id, "trainwire.best_checkpoint_id", best.checkpoint_id)
                self._log_model(mlflow_run_id, best)
            if event.state_change.reason:
                self._client.set_tag(mlflow_run_id, "trainwire.state_reason", event.state_change.reason[:5000])
        finally:
            status = _tracking.mlflow_status(common_pb2.RunState.Name(state))
            self._client.set_terminated(mlflow_run_id, status)
            self._runs.pop(event.run_id, None)

    def _final_record(self, run_id: str) -> coordinator_pb2.Run | None:
        """The run's record once it says the run ended (written just after the state event)."""
        deadline = time.monotonic() + RECORD_WAIT_S
        while True:
            run = self._run(run_id)
            if run is None or run.state in TERMINAL or time.monotonic() > deadline:
                return run
            time.sleep(0.1)

    # --- the best checkpoint as the run's model artifact -------------------------------------
    def _log_model(self, mlflow_run_id: str, best: common_pb2.CheckpointInfo) -> None:
        """Uploads the run's best checkpoint as ``checkpoint/`` (an MLflow failure is logged, the run ends)."""
        try:
            skipped = self._upload_checkpoint(mlflow_run_id, best.uri, ARTIFACT_PATH)
        except DataLossError as exc:  # a file that does not match the manifest: not a model to publish
            logger.warning("trainwire: checkpoint %s not uploaded to MLflow: %s", best.uri, exc.message)
            skipped = f"not uploaded: {exc.message}"
        except Exception as exc:  # a store or MLflow error: the URI tag stays, the run still ends
            logger.exception("trainwire: uploading checkpoint %s to MLflow at %s failed", best.uri, self.uri)
            skipped = f"upload failed: {exc}"
        if skipped:
            self._client.set_tag(mlflow_run_id, ARTIFACT_SKIPPED_TAG, skipped[:5000])
        else:
            self._client.set_tag(mlflow_run_id, ARTIFACT_CHECKPOINT_TAG, best.checkpoint_id)

    def _upload_checkpoint(self, mlflow_run_id: str, uri: str, artifact_path: str) -> str:
        """Copies the checkpoint at ``uri`` into the MLflow run's ``artifact_path``; "" or why not.

        Every file but the predictor's cache (``.compiled/``), checked against the checkpoint's
        manifest first (DataLossError for a file that does not match it). Files are copied as
        bytes: nothing is loaded, nothing unpickled.
        """
        fs, path = resolve(uri)
        store = Store.for_filesystem(fs, path)
        files = [(rel, size) for rel, size in store.walk_files(path) if _is_checkpoint_file(rel)]
        if not files:
            return f"checkpoint {uri} has no files"
        total = sum(size for _, size in files)
        if total > self.max_artifact_bytes:
            logger.warning(
                "trainwire: checkpoint %s has %d bytes, over mlflow_max_artifact_bytes (%d): MLflow gets its URI only",
                uri,
                total,
                self.max_artifact_bytes,
            )
            return f"{total} bytes, over mlflow_max_artifact_bytes ({self.max_artifact_bytes})"
        if store.is_local:
            verify_checkpoint(store, path, uri)
            root = os.path.realpath(path)
            for rel, _ in files:
                local = os.path.join(path, rel)
                if not os.path.realpath(local).startswith(root + os.sep):
                    logger.warning("trainwire: %s/%s links outside the checkpoint: not uploaded", uri, rel)
                    continue
                target = posixpath.join(artifact_path, posixpath.dirname(rel)).rstrip("/")
                self._client.log_artifact(mlflow_run_id, local, target)
            return ""
        with tempfile.TemporaryDirectory(prefix="trainwire-mlflow-") as tmp:
            store.download_dir(path, tmp, skip=lambda rel: not _is_checkpoint_file(rel))
            verify_checkpoint(Store.for_filesystem(pafs.LocalFileSystem(), tmp), tmp, uri)
            self._client.log_artifacts(mlflow_run_id, tmp, artifact_path)
        return ""

    # --- trainwire aliases as MLflow registry aliases ----------------------------------------
    def _mirror_alias(self, change: AliasChange) -> None:
        from mlflow.exceptions import MlflowException

        client = self._mlflow()
        if not change.version:
            try:
                client.delete_registered_model_alias(change.model, change.alias)
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
            return
        self._registered_model(change.model)
        version = self._model_version(change)
        client.set_registered_model_alias(change.model, change.alias, version)

    def _registered_model(self, name: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._client.get_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            try:
                self._client.create_registered_model(name, tags={"trainwire.model": name})
            except MlflowException as again:  # another coordinator made it meanwhile
                if again.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise

    def _model_version(self, change: AliasChange) -> str:
        """The MLflow model version of ``change``'s checkpoint: found by its tags, else created."""
        quoted = _quoted(change.model)
        found = self._client.search_model_versions(
            f"name = {quoted} and tags.`{RUN_ID_TAG}` = '{change.run_id}' "
            f"and tags.`{CHECKPOINT_ID_TAG}` = '{change.version}'"
        )
        if found:
            return str(min(found, key=lambda v: int(v.version)).version)
        source, mlflow_run_id = self._version_source(change)
        created = self._client.create_model_version(
            change.model,
            source,
            run_id=mlflow_run_id or None,
            tags={RUN_ID_TAG: change.run_id, CHECKPOINT_ID_TAG: change.version, CHECKPOINT_URI_TAG: change.uri},
            description=f"trainwire checkpoint {change.version} of run {change.run_id}",
        )
        return str(created.version)

    def _version_source(self, change: AliasChange) -> tuple[str, str]:
        """(source, MLflow run id) of a new model version: the checkpoint's artifact, else its URI."""
        run = self._find_mlflow_run(change.run_id)
        if run is None:
            return change.uri, ""
        artifact_root = run.info.artifact_uri.rstrip("/")
        if run.data.tags.get(ARTIFACT_CHECKPOINT_TAG) == change.version:
            return f"{artifact_root}/{ARTIFACT_PATH}", run.info.run_id
        artifact_path = f"{ALIASED_ARTIFACT_DIR}/{change.version}"
        if not self._client.list_artifacts(run.info.run_id, artifact_path):
            skipped = self._upload_checkpoint(run.info.run_id, change.uri, artifact_path)
            if skipped:
                return change.uri, run.info.run_id
        return f"{artifact_root}/{artifact_path}", run.info.run_id


def _is_checkpoint_file(rel: str) -> bool:
    """A checkpoint's own file: not the predictor's cache, not a rank's staging left over."""
    return not is_derived_path(rel) and not rel.startswith(RANK_STAGING_PREFIX)


def _quoted(name: str) -> str:
    """``name`` as a string in an MLflow search filter (single quotes, else double quotes)."""
    if "'" not in name:
        return f"'{name}'"
    if '"' not in name:
        return f'"{name}"'
    raise ValueError(f"model name {name!r} has both quote characters: MLflow's search cannot name it")
