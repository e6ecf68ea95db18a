"""TLS and mutual TLS on the coordinator (public API and worker report streams) and the predictor.

The CA and certificates are made at test time by ``trainwire tls init``, as an operator makes them.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tls_fixtures import PKI

from trainwire_core.certificates import DEFAULT_NAMES, init_directory
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError
from trainwire_core.serving import open_channel
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import common_pb2


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


def test_tls_init_names_every_compose_service_and_keeps_keys_private(pki, tmp_path):
    server = x509.load_pem_x509_certificates(open(pki.server[0], "rb").read())[0]
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(names.get_values_for_type(x509.DNSName))
    assert {"coordinator", "predictor-1", "predictor-2", "trainwire-predictor-1", "localhost"} <= dns
    assert len(dns) + len(names.get_values_for_type(x509.IPAddress)) == len(DEFAULT_NAMES)
    for key in (pki.server[1], pki.client[1]):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600

    # A second run keeps what is there (the services trust that CA) unless told to replace it.
    def tls_init(directory):
        argv = [sys.executable, "-m", "trainwire.cli", "tls", "init", str(directory)]
        return subprocess.run(argv, capture_output=True, text=True)

    assert tls_init(tmp_path).returncode == 0
    again = tls_init(tmp_path)
    assert again.returncode == 1 and "FAILED_PRECONDITION" in again.stderr and "--force" in again.stderr
    with pytest.raises(FailedPreconditionError) as info:
        init_directory(tmp_path)
    assert info.value.field == "directory"
    before = (tmp_path / "ca.pem").read_bytes()
    files = init_directory(tmp_path, force=True, names=("trainwire.example.org", "203.0.113.7"))
    assert files.ca.read_bytes() != before and files.ca_key is None and not (tmp_path / "ca-key.pem").exists()
    with pytest.raises(InvalidArgumentError) as info:
        init_directory(tmp_path / "x", names=("bad name",))
    assert info.value.field == "names"


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
        # A replica dialled by its address (the console sums every replica's statistics) is
        # verified by the name it serves under.
        assert PredictorClient(address, timeout_s=5, server_name="predictor-2").is_model_ready("m") is False
        with pytest.raises(UnavailableError):
            PredictorClient(address, timeout_s=5, server_name="elsewhere.example").is_model_ready("m")
    finally:
        thread.stop()
