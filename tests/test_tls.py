"""TLS and mutual TLS on the coordinator (public API and worker report streams) and the predictor.

The CA and certificates are made at test time with ``cryptography``.
"""

from __future__ import annotations

import datetime
import ipaddress
import time

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from trainwire_core.errors import UnavailableError
from trainwire_core.tls import ClientTLS, open_channel
from trainwire_core.v1 import common_pb2


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(cn: str, issuer_key, issuer_name, *, ca: bool = False, key=None):
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer_name or _name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return key, cert


class PKI:
    """A CA, a server certificate for 127.0.0.1, and a client certificate, as PEM files."""

    def __init__(self, directory) -> None:
        ca_key, ca_cert = _issue("trainwire test CA", None, None, ca=True)
        self.files = {}
        for name, (key, cert) in {
            "ca": (ca_key, ca_cert),
            "server": _issue("trainwire server", ca_key, ca_cert.subject),
            "client": _issue("trainwire client", ca_key, ca_cert.subject),
        }.items():
            (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            (directory / f"{name}.key").write_bytes(_pem_key(key))
            self.files[name] = (str(directory / f"{name}.pem"), str(directory / f"{name}.key"))
        self.ca = self.files["ca"][0]
        self.server = self.files["server"]
        self.client = self.files["client"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


def _coordinator(tmp_path, pki: PKI, mutual: bool):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    thread = CoordinatorThread(
        CoordinatorSettings(
            port=0,
            store=str(tmp_path / "store"),
            state=str(tmp_path / "state.db"),
            tls_cert=pki.server[0],
            tls_key=pki.server[1],
            tls_ca=pki.ca,
            tls_client_ca=pki.ca if mutual else "",
            worker_pool_idle_s=0,
        )
    )
    return thread, thread.start()


def _health(address: str, tls: ClientTLS | None) -> int:
    with open_channel(address, [], tls) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def _fit_xgboost(address: str, tls: ClientTLS, cancer_data) -> common_pb2.RunState:
    """A two-worker XGBoost fit: its workers report to the coordinator over TLS."""
    from trainwire import ScalingConfig
    from trainwire.client import CoordinatorClient
    from trainwire.xgboost import XGBoostTrainer

    train_df, valid_df = cancer_data
    client = CoordinatorClient(address, tls=tls)
    try:
        trainer = XGBoostTrainer(
            params={"objective": "binary:logistic", "eval_metric": ["logloss"]},
            label_column="target",
            num_boost_round=5,
            datasets={"train": train_df, "valid": valid_df},
            scaling_config=ScalingConfig(num_workers=2),
        )
        run = client.fit(trainer.build_request(client))
        deadline = time.monotonic() + 120
        while (run := client.get_run(run.run_id)).state not in (common_pb2.SUCCEEDED, common_pb2.FAILED):
            assert time.monotonic() < deadline, "the fit did not end"
            time.sleep(0.3)
        assert run.latest_checkpoint.checkpoint_id, "no checkpoint was reported over TLS"
        return run.state
    finally:
        client.close()


def test_tls_coordinator(ray_cluster, tmp_path, pki, cancer_data):
    thread, address = _coordinator(tmp_path, pki, mutual=False)
    try:
        with pytest.raises(grpc.RpcError) as err:
            _health(address, None)  # plaintext against a TLS port
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as err:
            _health(address, ClientTLS())  # the system's roots do not know the test CA
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with_ca = ClientTLS.from_files(ca=pki.ca)
        assert _health(address, with_ca) == health_pb2.HealthCheckResponse.SERVING
        assert _fit_xgboost(address, with_ca, cancer_data) == common_pb2.SUCCEEDED
    finally:
        thread.stop()


def test_mutual_tls_coordinator(ray_cluster, tmp_path, pki, cancer_data):
    thread, address = _coordinator(tmp_path, pki, mutual=True)
    try:
        with pytest.raises(grpc.RpcError) as err:
            _health(address, ClientTLS.from_files(ca=pki.ca))  # no client certificate
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        mutual = ClientTLS.from_files(ca=pki.ca, cert=pki.client[0], key=pki.client[1])
        assert _health(address, mutual) == health_pb2.HealthCheckResponse.SERVING
        assert _fit_xgboost(address, mutual, cancer_data) == common_pb2.SUCCEEDED
    finally:
        thread.stop()


def test_tls_predictor_and_sdk_client(tmp_path, pki, monkeypatch):
    from trainwire.predictor_client import PredictorClient
    from trainwire_core.serving import ServerThread
    from trainwire_predictor.server import PredictorServer
    from trainwire_predictor.settings import PredictorSettings

    thread = ServerThread(
        PredictorServer(
            PredictorSettings(
                port=0,
                store=str(tmp_path / "store"),
                tls_cert=pki.server[0],
                tls_key=pki.server[1],
                tls_client_ca=pki.ca,
            )
        ),
        "predictor",
    )
    address = thread.start()
    try:
        with pytest.raises(UnavailableError):
            PredictorClient(address, timeout_s=5, tls=ClientTLS.from_files(ca=pki.ca)).is_model_ready("m")
        # The SDK reads TRAINWIRE_TLS_* when given no paths (as the CLI and init() do).
        monkeypatch.setenv("TRAINWIRE_TLS_CA", pki.ca)
        monkeypatch.setenv("TRAINWIRE_TLS_CERT", pki.client[0])
        monkeypatch.setenv("TRAINWIRE_TLS_KEY", pki.client[1])
        assert PredictorClient(address, timeout_s=5).is_model_ready("m") is False
    finally:
        thread.stop()
