"""Session-wide fixtures: one Ray cluster, one coordinator, small datasets."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pandas as pd
import pytest
import redis

os.environ.setdefault("RAY_DEDUP_LOGS", "0")

# The models and the predictor that the SDK's and the predictor's tests share.
pytest_plugins = ["serving_fixtures"]

# A test that uses one of these fixtures (itself or through another) starts Ray or a service.
INTEGRATION_FIXTURES = frozenset({"ray_cluster", "redis_url", "mlflow_uri", "predictor", "rest_predictor"})
# Folders whose tests start Ray or services themselves.
INTEGRATION_FOLDERS = frozenset({"integration", "e2e"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks integration tests, so ``pytest -m "not integration"`` runs the unit tests alone."""
    for item in items:
        uses = INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if uses or item.path.parent.name in INTEGRATION_FOLDERS:
            item.add_marker(pytest.mark.integration)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Starts a throwaway redis-server on a free port for the whole session."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not on PATH; install it (e.g. `apt-get install -y redis-server`)")
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=open(workdir / "redis.log", "wb"),  # noqa: SIM115 - the server owns it
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                output = (workdir / "redis.log").read_text(errors="replace")
                pytest.fail(f"redis-server exited with {proc.returncode}:\n{output}")
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server did not answer PING on port {port} within 10s")
            time.sleep(0.05)
        yield url
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def deployment_tls(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A deployment's TLS directory, as `trainwire tls init` makes it (docker-compose.yml mounts $TRAINWIRE_TLS_DIR)."""
    from trainwire_core.certificates import init_directory

    directory = tmp_path_factory.mktemp("deployment-tls")
    init_directory(directory)
    return directory


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray with 4 logical CPUs (more than this 2-core machine has)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def coordinator(ray_cluster, tmp_path_factory):
    """A real coordinator gRPC server on a loopback port, shared by the session."""
    import trainwire
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    home = tmp_path_factory.mktemp("trainwire")
    thread = CoordinatorThread(
        CoordinatorSettings(
            host="127.0.0.1",
            port=0,
            store=str(home / "store"),
            state=str(home / "state.db"),
            watch_poll_s=0.2,
            # Idle warm workers hold CPUs that Ray Data jobs in other tests need.
            worker_pool_idle_s=3,
            # This one-node Ray never gains nodes: refuse what it cannot hold at once.
            capacity_wait_s=0,
            # Tests name datasets and storage paths in their own temporary directories.
            allowed_path_prefixes=[f"file://{tmp_path_factory.getbasetemp()}"],
        )
    )
    address = thread.start()
    trainwire.init(address)
    yield thread
    trainwire.shutdown()
    thread.stop()


@pytest.fixture(scope="session")
def coordinator_address(coordinator) -> str:
    return coordinator.server.address


@pytest.fixture(scope="session")
def store(coordinator):
    """The coordinator's shared store."""
    return coordinator.server.runs.store


@pytest.fixture(scope="session")
def client(coordinator_address):
    from trainwire.client import CoordinatorClient

    c = CoordinatorClient(coordinator_address)
    yield c
    c.close()


@pytest.fixture(scope="session")
def cancer_data() -> tuple[pd.DataFrame, pd.DataFrame]:
    """sklearn's breast cancer data, split 70/30 with a fixed seed."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    df = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    train_df, valid_df = train_test_split(df, test_size=0.3, random_state=0)
    return train_df.reset_index(drop=True), valid_df.reset_index(drop=True)
