"""Session-wide fixtures: one Ray cluster, one coordinator, small datasets."""

from __future__ import annotations

import os

import pandas as pd
import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


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
