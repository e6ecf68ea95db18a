"""What every trainwire gRPC server and client shares: message limits, channels, health, reflection, running."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from trainwire_core import auth
from trainwire_core.auth import Caller, TokenTable

# Metadata of a worker's report stream: the run it reports for and that run's secret.
REPORT_RUN_ID_METADATA = "x-trainwire-run-id"
REPORT_SECRET_METADATA = "x-trainwire-report-secret"

logger = logging.getLogger(__name__)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Requires a known ``authorization: Bearer <token>`` on the methods of ``services``, and its scope.

    Calls to any other service (health checking, server reflection, worker report
    streams with their own secret) pass untouched. A missing or unknown token is
    refused with UNAUTHENTICATED, a token without the method's scope with
    PERMISSION_DENIED naming it, both before the handler runs; the handler sees
    the caller as ``trainwire_core.auth.current_caller()``.

    Args:
        tokens: The accepted tokens (a ``TokenTable``, or one plain token holding every scope).
        services: Fully-qualified names of the protected services, e.g. ``inference.GRPCInferenceService``.
        method_scopes: The scope each method needs, by its last name (``"Fit"``); ``default_scope`` otherwise.
        default_scope: The scope of methods not in ``method_scopes``.
    """

    def __init__(
        self,
        tokens: TokenTable | str,
        services: Iterable[str],
        method_scopes: Mapping[str, str] | None = None,
        default_scope: str = auth.ADMIN,
    ) -> None:
        self._tokens = tokens if isinstance(tokens, TokenTable) else TokenTable.from_settings(token=tokens)
        if not self._tokens:
            raise ValueError("BearerTokenInterceptor needs at least one token")
        self._prefixes = tuple(f"/{name}/" for name in services)
        self._scopes = dict(method_scopes or {})
        self._default_scope = default_scope

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        method = handler_call_details.method
        if not method.startswith(self._prefixes):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        caller = self._tokens.identify(handler_call_details.invocation_metadata)
        if caller is None:
            return _refusing_handler(handler, grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
        scope = self._scopes.get(method.rsplit("/", 1)[-1], self._default_scope)
        if scope != auth.ANY_TOKEN and scope not in caller.scopes:
            message = f"token {caller.name!r} lacks the {scope!r} scope"
            return _refusing_handler(handler, grpc.StatusCode.PERMISSION_DENIED, message)
        return _as_caller(handler, caller) if handler is not None else None


_UNAUTHENTICATED = "missing or wrong 'authorization: Bearer <token>' metadata"


def _refusing_handler(
    handler: grpc.RpcMethodHandler | None, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as ``handler`` that refuses with ``code``."""

    async def deny(request, context):  # type: ignore[no-untyped-def]
        await context.abort(code, message)

    if handler is not None and handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny)
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if handler is not None and handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


def _as_caller(handler: grpc.RpcMethodHandler, caller: Caller) -> grpc.RpcMethodHandler:
    """``handler``, run with ``caller`` as the current caller."""
    kind = (handler.request_streaming, handler.response_streaming)
    behaviour = {
        (False, False): handler.unary_unary,
        (False, True): handler.unary_stream,
        (True, False): handler.stream_unary,
        (True, True): handler.stream_stream,
    }[kind]

    if handler.response_streaming:

        async def streaming(request, context):  # type: ignore[no-untyped-def]
            # Not reset after: the call's task (and its context) ends with the stream, and a
            # stream the client dropped is closed from another context, where a reset fails.
            auth.set_caller(caller)
            async for response in behaviour(request, context):
                yield response

        wrapped: Any = streaming
    else:

        async def unary(request, context):  # type: ignore[no-untyped-def]
            token = auth.set_caller(caller)
            try:
                return await behaviour(request, context)
            finally:
                auth.reset_caller(token)

        wrapped = unary
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[kind]
    return make(
        wrapped, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )


class Startable(Protocol):
    address: str

    async def start(self) -> str: ...

    async def stop(self, grace_s: float = 5.0) -> None: ...


class ChannelSecurity(Protocol):
    """How a client verifies a server (``trainwire_core.tls.ClientTLS``)."""

    def credentials(self) -> grpc.ChannelCredentials: ...


def open_channel(address: str, options: list[tuple[str, int]], tls: ChannelSecurity | None) -> grpc.Channel:
    """A channel to ``address``: TLS when ``tls`` is given, plaintext otherwise (TLS is entered only then)."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.credentials(), options=options)


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


def reflection_pool(*files: FileDescriptor) -> descriptor_pool.DescriptorPool:
    """One pool holding ``files`` and their imports, whichever pools they come from.

    The inference stubs live in a private pool (so tritonclient's copy of the same
    protos can share the process) while health and reflection live in the default
    one; server reflection answers from a single pool, so it gets this one.
    """
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: FileDescriptor) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.AddSerializedFile(proto.SerializeToString())
        added.add(file.name)

    for file in files:
        add(file)
    return pool


def add_health_and_reflection(
    server: grpc.aio.Server, service_names: Iterable[str], *private_files: FileDescriptor
) -> health.aio.HealthServicer:
    """Registers gRPC health checking and server reflection (so grpcurl and ghz need no protos).

    Args:
        server: The server.
        service_names: Full names of the server's own services.
        *private_files: Descriptors of services built in a private pool (the inference stubs):
            reflection then answers from one pool holding them beside health and reflection.
    """
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME)
    pool = reflection_pool(*private_files, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR) if private_files else None
    reflection.enable_server_reflection(names, server, pool)
    return health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, service_names: Iterable[str]) -> None:
    for name in (*service_names, ""):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def advertised_address(host: str, port: int, node_ip: Callable[[], str] | None = None) -> str:
    """The ``host:port`` others reach a server bound to ``host`` at."""
    if host in ("0.0.0.0", "::", "[::]"):
        host = node_ip() if node_ip is not None else socket.gethostbyname(socket.gethostname())
    return f"{host}:{port}"


class OpenDoorError(RuntimeError):
    """A server would listen beyond loopback with no token: anyone who reaches it could use it."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is reachable from this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def check_door(server: str, host: str, token: str, allow_unauthenticated: bool, token_setting: str) -> None:
    """Refuses a server bound beyond loopback without a bearer token, unless told explicitly.

    Args:
        server: What is starting ("the coordinator").
        host: The address it binds.
        token: Its bearer token ("" for none).
        allow_unauthenticated: The operator chose to run without one (logged as a warning).
        token_setting: The environment variable that sets the token.

    Raises:
        OpenDoorError: Beyond loopback, no token, and not allowed.
    """
    if token or is_loopback(host):
        return
    if allow_unauthenticated:
        logger.warning("%s listens on %s with no token: anyone who reaches it can use it", server, host)
        return
    raise OpenDoorError(
        f"{server} refuses to listen on {host} without a token: set {token_setting} (clients send it as "
        "TRAINWIRE_TOKEN), bind 127.0.0.1, or pass --allow-unauthenticated to run without one"
    )


# SIGTERM must end a server within 10 s (what orchestrators wait before a kill), even
# when its event loop is stuck: the rest of that time is the graceful stop's.
STOP_DEADLINE_S = 8.0


def _exit_after(deadline_s: float) -> None:
    def force() -> None:
        # No stop path may depend on a pipe: an embedded service's stdout dies with its program,
        # and a print() there raises BrokenPipeError before the exit below would run.
        with contextlib.suppress(OSError):
            os.write(2, f"trainwire: still stopping {deadline_s:.0f} s after the signal; exiting now\n".encode())
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
