"""What every trainwire gRPC server shares: message limits, health, reflection, running."""

from __future__ import annotations

import asyncio
import hmac
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

# Metadata of a worker's report stream: the run it reports for and that run's secret.
REPORT_RUN_ID_METADATA = "x-trainwire-run-id"
REPORT_SECRET_METADATA = "x-trainwire-report-secret"


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Requires ``authorization: Bearer <token>`` on the methods of ``services``.

    Calls to any other service (health checking, server reflection, worker report
    streams with their own secret) pass untouched. A missing or wrong token is
    refused with UNAUTHENTICATED before the handler runs.

    Args:
        token: The expected bearer token (non-empty).
        services: Fully-qualified names of the protected services, e.g. ``inference.GRPCInferenceService``.
    """

    def __init__(self, token: str, services: Iterable[str]) -> None:
        if not token:
            raise ValueError("BearerTokenInterceptor needs a non-empty token")
        self._expected = f"Bearer {token}".encode()
        self._prefixes = tuple(f"/{name}/" for name in services)

    def authorized(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
        for key, value in metadata or ():
            if key == "authorization":
                got = value if isinstance(value, bytes) else value.encode()
                return hmac.compare_digest(got, self._expected)
        return False

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        if not handler_call_details.method.startswith(self._prefixes):
            return await continuation(handler_call_details)
        if self.authorized(handler_call_details.invocation_metadata):
            return await continuation(handler_call_details)
        return _deny_handler(await continuation(handler_call_details))


_UNAUTHENTICATED = "missing or wrong 'authorization: Bearer <token>' metadata"


def _deny_handler(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as ``handler`` that refuses with UNAUTHENTICATED."""

    async def deny(request, context):  # type: ignore[no-untyped-def]
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)

    if handler is not None and handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny)
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


class Startable(Protocol):
    address: str

    async def start(self) -> str: ...

    async def stop(self, grace_s: float = 5.0) -> None: ...


def message_size_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


# A cut link sends no reset: without pings a channel keeps a dead connection READY until TCP gives
# up (minutes), and round robin keeps picking it. Clients ping every 2 s, even when idle.
KEEPALIVE_CLIENT_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
# Servers accept those pings (by default they answer frequent pings with GOAWAY).
KEEPALIVE_SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
]


def add_health_and_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> health.aio.HealthServicer:
    """Registers gRPC health checking and server reflection (so grpcurl and ghz need no protos)."""
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, service_names: Iterable[str]) -> None:
    for name in (*service_names, ""):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def advertised_address(host: str, port: int, node_ip: Callable[[], str] | None = None) -> str:
    """The ``host:port`` others reach a server bound to ``host`` at."""
    if host in ("0.0.0.0", "::", "[::]"):
        host = node_ip() if node_ip is not None else socket.gethostbyname(socket.gethostname())
    return f"{host}:{port}"


# SIGTERM must end a server within 10 s (what orchestrators wait before a kill), even
# when its event loop is stuck: the rest of that time is the graceful stop's.
STOP_DEADLINE_S = 8.0


def _exit_after(deadline_s: float) -> None:
    def force() -> None:
        print(f"trainwire: still stopping {deadline_s:.0f} s after the signal; exiting now", flush=True)
        os._exit(1)

    timer = threading.Timer(deadline_s, force)
    timer.daemon = True
    timer.start()


async def serve_until_signalled(
    server: Startable,
    banner: str,
    on_stop: Callable[[], Awaitable[None] | None] | None = None,
    stop_deadline_s: float = STOP_DEADLINE_S,
    *,
    stop_with_parent: bool = False,
) -> None:
    """Starts ``server``, prints ``<banner> listening on <address>``, stops on SIGTERM or SIGINT.

    The process exits at most ``stop_deadline_s`` after the signal, however busy it is. With
    ``stop_with_parent``, the end of standard input (the parent that holds the pipe has exited,
    however it died) stops it the same way: an embedded service never outlives its program.
    """
    address = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int, frame: Any) -> None:
        # A plain handler, not loop.add_signal_handler: it runs even while the loop is blocked.
        _exit_after(stop_deadline_s)
        loop.call_soon_threadsafe(stop.set)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    if stop_with_parent:
        stdin_fd = sys.stdin.fileno()

        def wait_for_parent() -> None:
            # The raw descriptor, not sys.stdin: a thread blocked in a buffered read holds a lock
            # that interpreter shutdown needs.
            while os.read(stdin_fd, 1 << 16):
                pass  # EOF: every writer of the pipe is gone
            on_signal(signal.SIGTERM, None)

        threading.Thread(target=wait_for_parent, name="trainwire-parent-watch", daemon=True).start()
    print(f"{banner} listening on {address}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
        if on_stop is not None and (pending := on_stop()) is not None:
            await pending


class ServerThread:
    """Runs a server on its own event loop in a background thread (tests, embedding)."""

    def __init__(self, server: Startable, name: str) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)

    def start(self, timeout_s: float = 120) -> str:
        """Starts the server; returns its ``host:port``."""
        self._thread.start()
        return self.call(self.server.start(), timeout_s)

    def call(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 60) -> Any:
        """Runs a coroutine on the server's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.call(self.server.stop(1.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class MetricsServer:
    """Serves a Prometheus registry over HTTP (``GET /metrics``) on a daemon thread.

    Args:
        registry: The service's own registry (not the process-global one).
        host: Address to bind.
        port: Port to bind (0 picks a free one; see ``port``).
    """

    def __init__(self, registry: Any, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        self._httpd: Any
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._httpd.server_port

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
