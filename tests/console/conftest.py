"""Fixtures of the console tests: one coordinator with named tokens and one predictor, shared by the package."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from console_helpers import ADMIN_TOKEN, TOKENS


@pytest.fixture(scope="package")
def console_coordinator(ray_cluster, tmp_path_factory):
    """A coordinator on a loopback port that takes the tokens above (the session's Ray)."""
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    home = tmp_path_factory.mktemp("console")
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    thread = CoordinatorThread(
        CoordinatorSettings(
            host="127.0.0.1",
            port=0,
            store=str(home / "store"),
            state=str(home / "state.db"),
            tokens=str(tokens),
            watch_poll_s=0.1,
            worker_pool_idle_s=30,
            capacity_wait_s=0,
        )
    )
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="package")
def console_address(console_coordinator) -> str:
    return console_coordinator.server.address


@pytest.fixture(scope="package")
def admin_client(console_address):
    from trainwire.client import CoordinatorClient

    client = CoordinatorClient(console_address, token=ADMIN_TOKEN)
    yield client
    client.close()


@pytest.fixture(scope="package")
def submit(admin_client) -> Callable[..., Any]:
    """Starts a one-worker data-parallel run of ``loop`` and returns its Run (without waiting for it)."""
    from trainwire import RunConfig, ScalingConfig
    from trainwire.trainer import DataParallelTrainer

    def start(loop: Callable[..., None], name: str, config: dict | None = None) -> Any:
        trainer = DataParallelTrainer(
            loop,
            train_loop_config=config or {},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(name=name, verbose=0),
        )
        return admin_client.fit(trainer.build_request(admin_client))

    return start
