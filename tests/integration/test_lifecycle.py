"""Run lifecycle: waiting for resources, cancelling, URIs as datasets, auth."""

from __future__ import annotations

import time

import grpc
import pytest

from trainwire import RunConfig, ScalingConfig
from trainwire.client import CoordinatorClient
from trainwire.torch import TorchTrainer
from trainwire.xgboost import XGBoostTrainer
from trainwire_core.errors import NotFoundError, UnauthenticatedError
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(180)


def sleepy_loop(config: dict) -> None:
    from trainwire import train

    for step in range(config["steps"]):
        train.report({"step": step})
        time.sleep(config["sleep_s"])


def _start(client: CoordinatorClient, workers: int, steps: int, sleep_s: float) -> str:
    trainer = TorchTrainer(
        sleepy_loop,
        train_loop_config={"steps": steps, "sleep_s": sleep_s},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(verbose=0),
    )
    return client.fit(trainer.build_request(client)).run_id


def _wait_for(client: CoordinatorClient, run_id: str, states: set[int], timeout_s: float = 60) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run.state in states:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} stayed {common_pb2.RunState.Name(run.state)}")


def test_a_run_that_must_wait_is_pending_with_the_reason(coordinator, client):
    coordinator.loop.call_soon_threadsafe(coordinator.server.runs.pool.evict_all)
    first = _start(client, 3, 40, 0.25)  # 3 of the cluster's 4 CPUs for ~10 s
    _wait_for(client, first, {common_pb2.RUNNING})
    second = _start(client, 2, 1, 0)
    run = _wait_for(client, second, {common_pb2.PENDING})
    deadline = time.monotonic() + 10
    while "waiting for resources" not in run.state_reason and time.monotonic() < deadline:
        time.sleep(0.2)
        run = client.get_run(second)
    assert "waiting for resources: 2 workers" in run.state_reason
    client.cancel_run(first)
    assert _wait_for(client, second, {common_pb2.SUCCEEDED}).state == common_pb2.SUCCEEDED


def test_cancel_a_running_run(coordinator, client):
    run_id = _start(client, 2, 200, 0.1)
    _wait_for(client, run_id, {common_pb2.RUNNING})
    run = client.cancel_run(run_id)
    assert run.state == common_pb2.CANCELLED
    assert run.state_reason == "cancelled by request"
    states = [e.state_change.state for e in client.watch_run(run_id) if e.HasField("state_change")]
    assert states[-1] == common_pb2.CANCELLED
    # Its workers are gone: the whole cluster is free again.
    import ray

    coordinator.loop.call_soon_threadsafe(coordinator.server.runs.pool.evict_all)
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= 4


def test_a_parquet_uri_is_a_dataset(coordinator, cancer_data, tmp_path):
    train_df, _ = cancer_data
    path = tmp_path / "train.parquet"
    train_df.to_parquet(path)
    result = XGBoostTrainer(
        params={"objective": "binary:logistic"},
        label_column="target",
        num_boost_round=3,
        datasets={"train": str(path)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(verbose=0),
    ).fit()
    assert len(result.metrics_dataframe) == 3


def test_a_token_is_required_when_configured(ray_cluster, tmp_path):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    thread = CoordinatorThread(
        CoordinatorSettings(port=0, store=str(tmp_path / "s"), state=str(tmp_path / "db"), auth_token="s3cret")
    )
    address = thread.start()
    try:
        with pytest.raises(UnauthenticatedError):
            CoordinatorClient(address).get_run("x")
        with pytest.raises(UnauthenticatedError):
            list(CoordinatorClient(address, token="wrong").watch_run("x"))
        with pytest.raises(NotFoundError):
            CoordinatorClient(address, token="s3cret").get_run("x")
        # Health checks stay open for load balancers.
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest()).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    finally:
        thread.stop()


def test_a_coordinator_on_redis_runs_and_records_a_fit(ray_cluster, redis_url, tmp_path, cancer_data):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    thread = CoordinatorThread(
        CoordinatorSettings(port=0, store=str(tmp_path / "s"), state=redis_url, worker_pool_idle_s=0)
    )
    address = thread.start()
    client = CoordinatorClient(address)
    try:
        trainer = XGBoostTrainer(
            params={"objective": "binary:logistic"},
            label_column="target",
            num_boost_round=2,
            datasets={"train": cancer_data[0]},
            run_config=RunConfig(name="on-redis", verbose=0),
        )
        run_id = client.fit(trainer.build_request(client)).run_id
        events = list(client.watch_run(run_id))
        assert events[-1].state_change.state == common_pb2.SUCCEEDED
        assert [e.event_id for e in events] == list(range(1, len(events) + 1))
        assert client.get_run("on-redis").latest_checkpoint.checkpoint_id == "checkpoint_000002"
        assert run_id in [r.run_id for r in client.list_runs([common_pb2.SUCCEEDED]).runs]
    finally:
        client.close()
        thread.stop()


def test_stop_criteria_end_the_run_early(coordinator, client):
    trainer = TorchTrainer(
        sleepy_loop,
        train_loop_config={"steps": 200, "sleep_s": 0.05},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(stop={"step": 3}, verbose=0),
    )
    run_id = client.fit(trainer.build_request(client)).run_id
    run = _wait_for(client, run_id, {common_pb2.SUCCEEDED, common_pb2.FAILED})
    assert run.state == common_pb2.SUCCEEDED and run.state_reason == "stop criteria reached"
    steps = [e.metrics.metrics["step"] for e in client.watch_run(run_id) if e.HasField("metrics")]
    assert 3 in steps and len(steps) < 200


def test_a_csv_uri_is_a_dataset(coordinator, cancer_data, tmp_path):
    from sklearn.linear_model import LogisticRegression

    from trainwire.sklearn import SklearnTrainer

    train_df, valid_df = cancer_data
    train_df.to_csv(tmp_path / "train.csv", index=False)
    valid_df.to_csv(tmp_path / "valid.csv", index=False)
    result = SklearnTrainer(
        estimator=LogisticRegression(max_iter=5000),
        label_column="target",
        datasets={"train": str(tmp_path / "train.csv"), "valid": str(tmp_path / "valid.csv")},
        run_config=RunConfig(verbose=0),
    ).fit()
    assert result.metrics["valid/score"] > 0.9


def test_a_repeated_fit_with_the_same_idempotency_key_returns_the_first_run(coordinator, client):
    trainer = TorchTrainer(
        sleepy_loop,
        train_loop_config={"steps": 1, "sleep_s": 0},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(verbose=0),
    )
    request = trainer.build_request(client)
    request.idempotency_key = "retry-me"
    first = client.fit(request)
    second = client.fit(request)
    assert second.run_id == first.run_id
    _wait_for(client, first.run_id, {common_pb2.SUCCEEDED})
    assert client.fit(request).run_id == first.run_id


def test_watch_reconnects_when_the_coordinator_comes_back(ray_cluster, tmp_path, cancer_data):
    import socket
    import threading

    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = CoordinatorSettings(port=port, store=str(tmp_path / "s"), state=str(tmp_path / "db"))
    first = CoordinatorThread(settings)
    address = first.start()
    client = CoordinatorClient(address)
    trainer = XGBoostTrainer(
        params={"objective": "binary:logistic"},
        label_column="target",
        num_boost_round=2,
        datasets={"train": cancer_data[0]},
        run_config=RunConfig(verbose=0),
    )
    run_id = client.fit(trainer.build_request(client)).run_id
    _wait_for(client, run_id, {common_pb2.SUCCEEDED})
    first.stop()

    seen: list = []
    watcher = threading.Thread(target=lambda: seen.extend(client.watch_run(run_id, reconnect_for_s=60)))
    watcher.start()
    time.sleep(1.0)  # the watcher is retrying against a closed port
    assert watcher.is_alive() and not seen
    second = CoordinatorThread(settings)
    second.start()
    try:
        watcher.join(30)
        assert not watcher.is_alive()
        assert [e.event_id for e in seen] == list(range(1, len(seen) + 1))
        assert seen[-1].state_change.state == common_pb2.SUCCEEDED
    finally:
        client.close()
        second.stop()
