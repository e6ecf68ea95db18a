"""The worker's side of ``WorkerReports.ReportStream``: one open stream per worker.

``send`` only queues the message, so a report costs the training loop a queue
put; a background thread feeds the stream. ``send_later`` queues a report that an
ASYNC checkpoint upload is still making: the stream waits for it there, so messages
go out (and checkpoints are committed) in the order the loop reported them.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

from trainwire_core.serving import REPORT_RUN_ID_METADATA as RUN_ID_METADATA
from trainwire_core.serving import REPORT_SECRET_METADATA as SECRET_METADATA
from trainwire_core.serving import message_size_options, open_channel
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import worker_reports_pb2, worker_reports_pb2_grpc

_CLOSE = object()


class ReportStreamClient:
    """Sends WorkerReport messages to the coordinator on one client stream.

    Args:
        address: The coordinator's ``host:port``.
        run_id: The run these reports belong to.
        secret: The run's report secret, given to its workers at start.
        max_message_bytes: Largest message to send.
        tls: How to verify the coordinator (None: plaintext).
    """

    def __init__(
        self,
        address: str,
        run_id: str,
        secret: str,
        max_message_bytes: int = 64 << 20,
        *,
        tls: ClientTLS | None = None,
    ) -> None:
        self._metadata = ((RUN_ID_METADATA, run_id), (SECRET_METADATA, secret))
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._channel = open_channel(address, message_size_options(max_message_bytes), tls)
        self._stub = worker_reports_pb2_grpc.WorkerReportsStub(self._channel)
        self._ack: worker_reports_pb2.ReportStreamAck | None = None
        self._error: BaseException | None = None
        self._failed_upload: BaseException | None = None
        self._uploads: list[Future] = []
        self._thread = threading.Thread(target=self._pump, name="trainwire-report-stream", daemon=True)
        self._thread.start()

    def _messages(self):  # noqa: ANN202 - a generator for grpc
        while (item := self._queue.get()) is not _CLOSE:
            if isinstance(item, Future):
                try:
                    item = item.result()
                except BaseException as exc:  # noqa: BLE001 - an upload that failed ends the stream
                    self._failed_upload = exc
                    return
            yield item

    def _pump(self) -> None:
        try:
            self._ack = self._stub.ReportStream(self._messages(), metadata=self._metadata, wait_for_ready=True)
        except BaseException as exc:  # noqa: BLE001 - surfaced by close()
            self._error = exc

    def send(self, report: worker_reports_pb2.WorkerReport) -> None:
        """Queues a report; never blocks on the network."""
        if self._error is not None:
            raise RuntimeError(f"the report stream to the coordinator failed: {self._error}") from self._error
        self._queue.put(report)

    def send_later(self, report: Future) -> None:
        """Queues a report that ``report`` (a Future of a WorkerReport) completes; never blocks."""
        if self._error is not None:
            raise RuntimeError(f"the report stream to the coordinator failed: {self._error}") from self._error
        self._uploads = [f for f in self._uploads if not f.done()]
        self._uploads.append(report)
        self._queue.put(report)

    def close(self, timeout_s: float = 60.0, uploads_timeout_s: float = 3600.0) -> worker_reports_pb2.ReportStreamAck:
        """Ends the stream and waits until the coordinator has handled every report.

        Queued ASYNC uploads finish first (up to ``uploads_timeout_s`` more).
        """
        self._queue.put(_CLOSE)
        # Uploads still under way get their time; the coordinator gets timeout_s after them.
        uploading = [f for f in self._uploads if not f.done()]
        for upload in uploading:
            try:
                upload.exception(timeout=uploads_timeout_s)
            except TimeoutError:
                break
        self._thread.join(timeout_s)
        self._channel.close()
        if self._thread.is_alive():
            raise TimeoutError(f"the coordinator did not take the reports within {timeout_s} s")
        if self._failed_upload is not None:
            raise RuntimeError(f"an ASYNC checkpoint upload failed: {self._failed_upload}") from self._failed_upload
        if self._error is not None:
            raise RuntimeError(f"the report stream to the coordinator failed: {self._error}") from self._error
        assert self._ack is not None
        return self._ack
