"""The low-level gRPC client of the coordinator."""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa

from trainwire_core.errors import DataLossError, NotFoundError
from trainwire_core.grpc_status import from_rpc_error
from trainwire_core.serving import KEEPALIVE_CLIENT_OPTIONS, message_size_options, open_channel
from trainwire_core.storage import is_relative_path
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, tune_pb2, tune_pb2_grpc

UPLOAD_CHUNK_BYTES = 1 << 20


def table_to_ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def format_log_line(line: coordinator_pb2.LogLine) -> str:
    """A worker's line as Ray prints its workers' output: prefixed with where it came from."""
    return f"(rank={line.world_rank}, attempt={line.attempt + 1}) {line.text}"


class CoordinatorClient:
    """Calls the Coordinator service; failed calls raise the matching TrainwireError.

    Args:
        address: ``host:port`` of the coordinator.
        token: Bearer token, when the coordinator requires one (default: ``$TRAINWIRE_TOKEN``).
        max_message_bytes: Largest message to send or receive.
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        max_message_bytes: int = 64 << 20,
        *,
        tls: ClientTLS | None = None,
    ) -> None:
        self.address = address
        token = token if token is not None else os.environ.get("TRAINWIRE_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        tls = tls if tls is not None else ClientTLS.from_files()
        self.channel = open_channel(address, [*message_size_options(max_message_bytes), *KEEPALIVE_CLIENT_OPTIONS], tls)
        self.stub = coordinator_pb2_grpc.CoordinatorStub(self.channel)

    def _call(self, method: str, request: object, **kwargs: object) -> object:
        try:
            return getattr(self.stub, method)(request, metadata=self._metadata, **kwargs)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def fit(self, request: coordinator_pb2.FitRequest) -> coordinator_pb2.Run:
        return self._call("Fit", request)

    def get_caller(self) -> coordinator_pb2.CallerInfo:
        """Who this client's token is and its scopes, as the coordinator sees them."""
        return self._call("GetCaller", coordinator_pb2.GetCallerRequest())

    def get_run(self, run_id: str) -> coordinator_pb2.Run:
        return self._call("GetRun", coordinator_pb2.GetRunRequest(run_id=run_id))

    def list_runs(
        self, states: list[int] | None = None, page_size: int = 100, page_token: str = "", *, submitted_by: str = ""
    ) -> coordinator_pb2.ListRunsResponse:
        """Runs, newest first; ``submitted_by`` keeps only those started with that token name."""
        request = coordinator_pb2.ListRunsRequest(
            states=states or [], page_size=page_size, page_token=page_token, submitted_by=submitted_by
        )
        return self._call("ListRuns", request)

    def cancel_run(self, run_id: str) -> coordinator_pb2.Run:
        return self._call("CancelRun", coordinator_pb2.CancelRunRequest(run_id=run_id))

    def watch_run(
        self, run_id: str, after_event_id: int = 0, reconnect_for_s: float = 60.0
    ) -> Iterator[coordinator_pb2.RunEvent]:
        """Streams a run's events until it ends.

        If the coordinator becomes unreachable, reconnects from the last event
        seen (no event is lost or repeated), backing off, for up to ``reconnect_for_s``.
        """
        last = after_event_id

        # In batches: a long run's history arrives in a few messages, not one per event.
        def call() -> Iterator[coordinator_pb2.RunEventBatch]:
            return self.stub.WatchRunBatched(
                coordinator_pb2.WatchRunRequest(run_id=run_id, after_event_id=last), metadata=self._metadata
            )

        for batch in self._resuming(call, reconnect_for_s):
            for event in batch.events:
                last = event.event_id
                yield event

    def watch_logs(
        self,
        run_id: str,
        *,
        ranks: list[int] | None = None,
        follow: bool = True,
        after: str = "",
        reconnect_for_s: float = 60.0,
    ) -> Iterator[coordinator_pb2.LogLine]:
        """Streams the workers' output lines; with ``follow``, until the run has ended.

        Reconnects as ``watch_run`` does, from the last line's cursor: no line is lost or repeated.
        """
        cursor = after

        def call() -> Iterator[coordinator_pb2.LogLines]:
            request = coordinator_pb2.WatchLogsRequest(run_id=run_id, ranks=ranks or [], follow=follow, after=cursor)
            return self.stub.WatchLogs(request, metadata=self._metadata)

        for batch in self._resuming(call, reconnect_for_s):
            for line in batch.lines:
                cursor = line.cursor
                yield line

    @staticmethod
    def _resuming(call: Callable[[], Iterator[Any]], reconnect_for_s: float) -> Iterator[Any]:
        """Items of a server stream, opened again by ``call`` (which resumes) while the server is UNAVAILABLE."""
        delay_s, give_up_at = 0.1, None
        while True:
            try:
                for item in call():
                    delay_s, give_up_at = 0.1, None
                    yield item
                return
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise from_rpc_error(err) from None
                give_up_at = give_up_at or time.monotonic() + reconnect_for_s
                if time.monotonic() >= give_up_at:
                    raise from_rpc_error(err) from None
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)

    def upload_table(self, table: pa.Table) -> coordinator_pb2.DatasetInfo:
        """Uploads an Arrow table once: the same content is never sent twice."""
        return self._upload_once("Dataset", table_to_ipc(table))

    def upload_package(self, data: bytes) -> coordinator_pb2.PackageInfo:
        """Uploads a runtime-environment package (a zip) once: the same content is never sent twice."""
        return self._upload_once("Package", data)

    def _upload_once(self, kind: str, data: bytes) -> Any:
        """``Get<kind>`` by content hash, then ``Upload<kind>`` (header, chunks) only if it is missing."""
        sha = hashlib.sha256(data).hexdigest()
        request_cls = getattr(coordinator_pb2, f"Upload{kind}Request")
        try:
            return self._call(f"Get{kind}", getattr(coordinator_pb2, f"Get{kind}Request")(sha256=sha))
        except NotFoundError:
            pass

        def parts() -> Iterator[Any]:
            header = getattr(coordinator_pb2, f"Upload{kind}Header")(sha256=sha, size_bytes=len(data))
            yield request_cls(header=header)
            for offset in range(0, len(data), UPLOAD_CHUNK_BYTES):
                yield request_cls(chunk=data[offset : offset + UPLOAD_CHUNK_BYTES])

        return self._call(f"Upload{kind}", parts())

    def upload_checkpoint(
        self, directory: str | os.PathLike, run_name: str, metrics: dict | None = None
    ) -> coordinator_pb2.CheckpointInfo:
        """Uploads a local checkpoint directory; it becomes the checkpoint of a new run named ``run_name``."""
        from google.protobuf import json_format

        from trainwire_core.manifest import is_derived_path
        from trainwire_core.storage import MANIFEST_NAME, Store

        root = Path(directory)
        # The coordinator writes the manifest and compiled models of the new checkpoint itself.
        files = sorted(
            p
            for p in root.rglob("*")
            if p.is_file()
            and p.relative_to(root).as_posix() != MANIFEST_NAME
            and not is_derived_path(p.relative_to(root).as_posix())
        )
        header = coordinator_pb2.UploadCheckpointHeader(run_name=run_name)
        json_format.ParseDict(metrics or {}, header.metrics)
        for path in files:
            size, digest = Store.hash_file(path)
            header.files.add(path=path.relative_to(root).as_posix(), size_bytes=size, sha256=digest)

        def parts() -> Iterator[coordinator_pb2.UploadCheckpointRequest]:
            yield coordinator_pb2.UploadCheckpointRequest(header=header)
            for path in files:
                rel = path.relative_to(root).as_posix()
                with open(path, "rb") as f:
                    offset = 0
                    while data := f.read(UPLOAD_CHUNK_BYTES):
                        yield coordinator_pb2.UploadCheckpointRequest(
                            chunk=coordinator_pb2.FileChunk(path=rel, offset=offset, data=data)
                        )
                        offset += len(data)

        return self._call("UploadCheckpoint", parts())

    def download_checkpoint(self, checkpoint: str, directory: str | os.PathLike) -> str:
        """Downloads a checkpoint (URI or ``<run>/<checkpoint id>``) into a local directory."""
        directory = Path(directory)
        handles: dict[str, object] = {}
        try:
            for chunk in self.stub.DownloadCheckpoint(
                coordinator_pb2.DownloadCheckpointRequest(checkpoint=checkpoint), metadata=self._metadata
            ):
                if not is_relative_path(chunk.path):
                    # A server (or whoever sits in between) must not make us write outside the target.
                    raise DataLossError(f"the coordinator sent a file path outside the checkpoint: {chunk.path!r}")
                target = directory / chunk.path
                if chunk.path not in handles:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    handles[chunk.path] = open(target, "wb")  # noqa: SIM115 - closed below
                handles[chunk.path].write(chunk.data)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            for handle in handles.values():
                handle.close()
        return str(directory)

    # --- hyperparameter searches (the Tuner service, on the same channel and token) ---
    @cached_property
    def tuner_stub(self) -> tune_pb2_grpc.TunerStub:
        return tune_pb2_grpc.TunerStub(self.channel)

    def _call_tuner(self, method: str, request: object) -> Any:
        try:
            return getattr(self.tuner_stub, method)(request, metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def tune(self, request: tune_pb2.TuneRequest) -> tune_pb2.TuneRun:
        """Starts a search (or returns the one started with the same ``idempotency_key``)."""
        return self._call_tuner("Tune", request)

    def get_tune(self, tune_id: str) -> tune_pb2.TuneRun:
        """A search by id, or the newest search of that name."""
        return self._call_tuner("GetTune", tune_pb2.GetTuneRequest(tune_id=tune_id))

    def list_tunes(self, page_size: int = 100, page_token: str = "") -> tune_pb2.ListTunesResponse:
        """Searches, newest first."""
        return self._call_tuner("ListTunes", tune_pb2.ListTunesRequest(page_size=page_size, page_token=page_token))

    def cancel_tune(self, tune_id: str) -> tune_pb2.TuneRun:
        """Stops a search: no new trials, running ones are cancelled."""
        return self._call_tuner("CancelTune", tune_pb2.GetTuneRequest(tune_id=tune_id))

    def resume_tune(self, request: tune_pb2.ResumeTuneRequest) -> tune_pb2.TuneRun:
        """Runs a search's failed trials again, or stops its unfinished ones (Ray's ``Tuner.restore`` modes)."""
        return self._call_tuner("ResumeTune", request)

    def watch_tune(self, tune_id: str, reconnect_for_s: float = 60.0) -> Iterator[tune_pb2.TuneRun]:
        """Snapshots of a search each time it changes, until it has ended.

        Reconnects as ``watch_run`` does; each message is a whole snapshot, so a reconnect
        starts the stream again (a snapshot equal to the last one seen is not repeated).
        """

        def call() -> Iterator[tune_pb2.TuneRun]:
            return self.tuner_stub.WatchTune(tune_pb2.GetTuneRequest(tune_id=tune_id), metadata=self._metadata)

        last: tune_pb2.TuneRun | None = None
        for snapshot in self._resuming(call, reconnect_for_s):
            if snapshot != last:
                last = snapshot
                yield snapshot

    def close(self) -> None:
        self.channel.close()


TERMINAL_STATES = frozenset({common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED})
