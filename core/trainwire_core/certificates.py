"""A self-signed CA and the certificates a deployment's services serve with (``trainwire tls init``).

One CA, one server certificate for every trainwire service (the names they are reached by in
``docker-compose.yml`` and on loopback, for their own health probes), and a client certificate
for mutual TLS. The CA's key is not kept unless asked: nothing else can be signed with it, and
a leaked directory lets nobody mint a certificate the services trust.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError

# The compose services a client dials (scaled ones by replica too: Docker's `<project>-<service>-<n>`
# and the twin's `<service>-<n>`), and loopback for each container's own health probe.
COMPOSE_SERVICES = ("coordinator", "predictor", "console")
MAX_REPLICAS = 16
DEFAULT_NAMES = (
    *COMPOSE_SERVICES,
    *(f"{s}-{i}" for s in COMPOSE_SERVICES for i in range(1, MAX_REPLICAS + 1)),
    *(f"trainwire-{s}-{i}" for s in COMPOSE_SERVICES for i in range(1, MAX_REPLICAS + 1)),
    "localhost",
    "127.0.0.1",
    "::1",
)
FILES = ("ca.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem")


@dataclass(frozen=True)
class IssuedFiles:
    """Paths of what ``init_directory`` wrote."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    ca_key: Path | None


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trainwire"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _alt_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        pass
    if not name or any(c.isspace() or c in "/\\@" for c in name) or len(name) > 253:
        raise InvalidArgumentError(f"{name!r} is not a host name or an IP address", field="names")
    return x509.DNSName(name)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    days: int,
    *,
    ca: bool = False,
    names: tuple[str, ...] = (),
    usage: tuple[x509.ObjectIdentifier, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks of other hosts may lag
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_alt_name(n) for n in names]), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, data: bytes, mode: int, owner: int | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)  # an existing file keeps its mode through O_CREAT
    if owner is not None:
        os.chown(path, owner, -1)


def init_directory(
    directory: str | os.PathLike,
    *,
    names: tuple[str, ...] = (),
    days: int = 825,
    force: bool = False,
    keep_ca_key: bool = False,
    owner: int | None = None,
) -> IssuedFiles:
    """Writes a new CA, a server certificate for ``DEFAULT_NAMES`` plus ``names``, and a client certificate.

    Args:
        directory: Where the PEM files go (made if missing).
        names: More host names or IP addresses the services are reached by (a published address).
        days: Validity of every certificate (825 days: the most browsers and Apple's clients accept).
        force: Replace certificates already there.
        keep_ca_key: Also write ``ca-key.pem``, to sign more certificates later.
        owner: A uid to own the files (the image's services run as 10001 and read their key).

    Raises:
        FailedPreconditionError: The directory holds certificates already and ``force`` is not set.
        InvalidArgumentError: A name is neither a host name nor an IP address, or ``days`` < 1.
    """
    if days < 1:
        raise InvalidArgumentError(f"days must be at least 1, got {days}", field="days")
    root = Path(directory)
    existing = [f for f in FILES if (root / f).exists()]
    if existing and not force:
        raise FailedPreconditionError(
            f"{root} holds {', '.join(existing)} already: keep them, or pass --force to replace them", field="directory"
        )
    all_names = tuple(dict.fromkeys((*DEFAULT_NAMES, *names)))
    for name in all_names:
        _alt_name(name)
    root.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("trainwire deployment CA")
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, days, ca=True)
    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    server = _certificate(
        _name("trainwire services"),
        server_key,
        ca_name,
        ca_key,
        days,
        names=all_names,
        # The workers present the coordinator's certificate on their report streams (mutual TLS).
        usage=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
    )
    client = _certificate(
        _name("trainwire client"), client_key, ca_name, ca_key, days, usage=(ExtendedKeyUsageOID.CLIENT_AUTH,)
    )
    pem = serialization.Encoding.PEM
    files = IssuedFiles(
        ca=root / "ca.pem",
        server_cert=root / "server.pem",
        server_key=root / "server-key.pem",
        client_cert=root / "client.pem",
        client_key=root / "client-key.pem",
        ca_key=root / "ca-key.pem" if keep_ca_key else None,
    )
    _write(files.ca, ca.public_bytes(pem), 0o644, owner)
    _write(files.server_cert, server.public_bytes(pem) + ca.public_bytes(pem), 0o644, owner)
    _write(files.server_key, _key_pem(server_key), 0o600, owner)
    _write(files.client_cert, client.public_bytes(pem), 0o644, owner)
    _write(files.client_key, _key_pem(client_key), 0o600, owner)
    if files.ca_key is not None:
        _write(files.ca_key, _key_pem(ca_key), 0o600, owner)
    return files
