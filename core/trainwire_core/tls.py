"""TLS and mutual TLS for every trainwire server and client (PEM files, as Triton and Kubernetes take them).

Clients read ``TRAINWIRE_TLS_CA``, ``TRAINWIRE_TLS_CERT`` and ``TRAINWIRE_TLS_KEY`` when no
paths are given, so the SDK, the CLI and ``trainwire.init()`` need no code change.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from trainwire_core.errors import InvalidArgumentError


def _read(path: str, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"{field}: cannot read {path!r}: {exc.strerror}", field=field) from None


@dataclass(frozen=True)
class ClientTLS:
    """What a client presents and trusts, as PEM bytes (picklable: workers get it from the coordinator).

    Attributes:
        ca: Roots that verify the server; empty means the system's roots.
        cert: Client certificate chain for mutual TLS.
        key: The client certificate's private key.
    """

    ca: bytes = b""
    cert: bytes = b""
    key: bytes = b""

    @classmethod
    def from_files(cls, ca: str = "", cert: str = "", key: str = "") -> ClientTLS | None:
        """Reads the given paths, else the ``TRAINWIRE_TLS_*`` environment; None when neither is set."""
        ca = ca or os.environ.get("TRAINWIRE_TLS_CA", "")
        cert = cert or os.environ.get("TRAINWIRE_TLS_CERT", "")
        key = key or os.environ.get("TRAINWIRE_TLS_KEY", "")
        if not (ca or cert or key):
            return None
        if bool(cert) != bool(key):
            raise InvalidArgumentError(
                "a client certificate needs its key, and a key its certificate", field="tls_cert"
            )
        return cls(
            ca=_read(ca, "tls_ca") if ca else b"",
            cert=_read(cert, "tls_cert") if cert else b"",
            key=_read(key, "tls_key") if key else b"",
        )

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca or None, private_key=self.key or None, certificate_chain=self.cert or None
        )


def add_port(server: grpc.aio.Server, address: str, cert: str = "", key: str = "", client_ca: str = "") -> int:
    """Binds ``address``: TLS when ``cert`` and ``key`` are set; mutual TLS when ``client_ca`` is too.

    Raises:
        InvalidArgumentError: a half-given pair, or a client CA without a server certificate.
    """
    if not cert and not key:
        if client_ca:
            raise InvalidArgumentError("tls_client_ca needs tls_cert and tls_key", field="tls_client_ca")
        return server.add_insecure_port(address)
    if not (cert and key):
        raise InvalidArgumentError("TLS needs both tls_cert and tls_key", field="tls_key" if cert else "tls_cert")
    credentials = grpc.ssl_server_credentials(
        [(_read(key, "tls_key"), _read(cert, "tls_cert"))],
        root_certificates=_read(client_ca, "tls_client_ca") if client_ca else None,
        require_client_auth=bool(client_ca),
    )
    return server.add_secure_port(address, credentials)


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """The TLS flags every trainwire server takes (settings ``tls_cert``, ``tls_key``, ``tls_client_ca``)."""
    parser.add_argument("--tls-cert", help="PEM certificate chain: serve over TLS")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-client-ca", help="PEM CA that client certificates must chain to (mutual TLS)")
