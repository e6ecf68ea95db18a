"""The coordinator's Prometheus endpoint, scraped and parsed with prometheus_client."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from trainwire import CheckpointConfig, RunConfig, ScalingConfig
from trainwire.client import CoordinatorClient
from trainwire.xgboost import XGBoostTrainer
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(240)

PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss"], "tree_method": "hist", "seed": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(address: str) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture(scope="module")
def metered(ray_cluster, tmp_path_factory):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    home = tmp_path_factory.mktemp("metered")
    thread = CoordinatorThread(
        CoordinatorSettings(
            host="127.0.0.1",
            port=0,
            store=str(home / "store"),
            state=str(home / "state.db"),
            metrics_port=_free_port(),
            worker_pool_idle_s=0,
        )
    )
    address = thread.start()
    client = CoordinatorClient(address)
    yield thread.server, client
    client.close()
    thread.stop()


def _run(client: CoordinatorClient, trainer: XGBoostTrainer) -> common_pb2.Run:
    run = client.fit(trainer.build_request(client))
    for _ in client.watch_run(run.run_id):
        pass
    return client.get_run(run.run_id)


def test_scrape_counts_reports_commits_runs_and_failures(metered, cancer_data):
    server, client = metered
    train_df, _ = cancer_data
    before = _scrape(server.metrics_address)
    assert before[("trainwire_runs", (("state", "RUNNING"),))] == 0

    ok = _run(
        client,
        XGBoostTrainer(
            params=PARAMS,
            label_column="target",
            num_boost_round=6,
            datasets={"train": train_df},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(checkpoint_config=CheckpointConfig(checkpoint_frequency=2), verbose=0),
        ),
    )
    assert ok.state == common_pb2.SUCCEEDED
    bad = _run(
        client,
        XGBoostTrainer(
            params={**PARAMS, "objective": "no-such-objective"},
            label_column="target",
            num_boost_round=2,
            datasets={"train": train_df},
            run_config=RunConfig(verbose=0),
        ),
    )
    assert bad.state == common_pb2.FAILED

    after = _scrape(server.metrics_address)
    # Two workers report every round; the failed run reports nothing.
    assert after[("trainwire_worker_reports_total", ())] == 2 * 6
    assert after[("trainwire_checkpoint_commit_duration_seconds_count", ())] == 3
    assert after[("trainwire_checkpoint_commit_duration_seconds_sum", ())] > 0
    assert after[("trainwire_runs_finished_total", (("state", "SUCCEEDED"),))] == 1
    assert after[("trainwire_runs_finished_total", (("state", "FAILED"),))] == 1
    assert after[("trainwire_worker_failures_total", (("counted", "true"),))] == 1
    assert all(after[("trainwire_runs", (("state", s),))] == 0 for s in ("PENDING", "RUNNING", "RESTARTING"))
