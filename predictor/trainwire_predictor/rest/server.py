"""The REST front end's server: uvicorn (httptools) on the predictor's own event loop, beside grpc.aio."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Generator

import uvicorn

from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.rest.endpoints import RestFrontEnd


class _EmbeddedServer(uvicorn.Server):
    """uvicorn on a loop it does not own: the predictor's process handles the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class RestServer:
    """Serves a ``RestFrontEnd`` with uvicorn on the running event loop.

    Args:
        front_end: The endpoints.
        host: Address to bind.
        port: Port to bind (0 picks a free one).
        tls_cert: PEM certificate chain: serve HTTPS.
        tls_key: Its private key.
        tls_client_ca: PEM CA that client certificates must chain to (mutual TLS).
        reuse_port: Bind with ``SO_REUSEPORT``: the workers of a group share the port.
    """

    def __init__(
        self,
        front_end: RestFrontEnd,
        host: str,
        port: int,
        tls_cert: str = "",
        tls_key: str = "",
        tls_client_ca: str = "",
        reuse_port: bool = False,
    ) -> None:
        self.reuse_port = reuse_port
        if bool(tls_cert) != bool(tls_key):
            raise InvalidArgumentError(
                "TLS needs both tls_cert and tls_key", field="tls_key" if tls_cert else "tls_cert"
            )
        if tls_client_ca and not tls_cert:
            raise InvalidArgumentError("tls_client_ca needs tls_cert and tls_key", field="tls_client_ca")
        self.config = uvicorn.Config(
            front_end.app(),
            host=host,
            port=port,
            http="httptools",
            lifespan="off",
            access_log=False,
            log_level="warning",
            server_header=False,
            ssl_certfile=tls_cert or None,
            ssl_keyfile=tls_key or None,
            ssl_ca_certs=tls_client_ca or None,
            ssl_cert_reqs=ssl.CERT_REQUIRED if tls_client_ca else ssl.CERT_NONE,
        )
        self.server = _EmbeddedServer(self.config)
        self.port = 0
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Binds and starts serving; returns the bound port."""
        self.config.load()  # builds the TLS context, so a bad certificate fails here
        self._socket = sock = self._bind_reuse_port() if self.reuse_port else self.config.bind_socket()
        self.port = sock.getsockname()[1]
        self._task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the REST server stopped while starting")
            await asyncio.sleep(0.01)
        return self.port

    def _bind_reuse_port(self) -> socket.socket:
        # One socket per worker, each accepting its own connections (the kernel spreads them), as
        # grpc does on the other port; a listening socket shared by every worker would wake them all.
        family, kind, proto, _, address = socket.getaddrinfo(
            self.config.host.strip("[]"), self.config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.set_inheritable(True)
        return sock

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stops accepting, lets requests in flight finish for up to ``grace_s``."""
        if self._task is None:
            return
        self.config.timeout_graceful_shutdown = max(grace_s, 0.1)
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace_s + 1.0)
        except Exception:  # noqa: BLE001 - stopping regardless (a timeout too)
            self.server.force_exit = True
            self._task.cancel()
        self._task = None
