"""Searches run by the coordinator, end to end: Ray Tune's API over the Tuner service.

XGBoost on breast cancer under ASHA and under FIFO (the same 16 samples), the winner served
by a real predictor under the search's name, a TorchTrainer grid, trials that raise, and bad
input; the coordinator-restart case lives in test_tune_restart.py.
"""

from __future__ import annotations

import json

import grpc
import numpy as np
import pandas as pd
import pytest
from google.protobuf import struct_pb2

from trainwire import RunConfig, ScalingConfig, train, tune
from trainwire.torch import TorchTrainer
from trainwire.tune import TuneConfig, Tuner
from trainwire.tune.schedulers import ASHAScheduler
from trainwire.xgboost import XGBoostTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.grpc_status import field_of
from trainwire_core.v1 import common_pb2, tune_pb2, tune_pb2_grpc

pytestmark = pytest.mark.timeout(600)

PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "tree_method": "hist", "seed": 0}
ROUNDS = 64
SPACE = {
    "params": {
        "eta": tune.loguniform(1e-3, 0.5),
        "max_depth": tune.randint(2, 9),
        "subsample": tune.uniform(0.5, 1.0),
    }
}


def _cancer_trainer(cancer_data) -> XGBoostTrainer:
    train_df, valid_df = cancer_data
    # Twenty copies of the rows: boosting rounds take long enough that stopping a trial saves time.
    train_df = pd.concat([train_df] * 20, ignore_index=True)
    return XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=ROUNDS,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=1),
    )


def _search(cancer_data, name: str, scheduler=None):
    return Tuner(
        _cancer_trainer(cancer_data),
        param_space=SPACE,
        tune_config=TuneConfig(
            metric="valid-logloss",
            mode="min",
            num_samples=16,
            max_concurrent_trials=2,
            scheduler=scheduler,
            search_alg=tune.search.BasicVariantGenerator(random_state=7),
        ),
        run_config=RunConfig(name=name, verbose=0),
    ).fit()


@pytest.fixture(scope="module")
def searches(coordinator, cancer_data):
    asha = ASHAScheduler(time_attr="training_iteration", max_t=ROUNDS, grace_period=4, reduction_factor=2)
    return _search(cancer_data, "cancer-asha", asha), _search(cancer_data, "cancer-fifo")


def _rounds(grid) -> int:
    return sum(int(r.metrics["training_iteration"]) for r in grid)


def test_asha_stops_half_the_trials_early_and_finds_as_good_a_model(searches, client):
    asha, fifo = searches
    assert len(asha) == len(fifo) == 16
    # The same seed draws the same 16 configurations under both schedulers.
    assert [r.config for r in asha] == [r.config for r in fifo]
    tune_run = client.get_tune("cancer-asha")
    stopped = [t for t in tune_run.trials if t.early_stopped]
    assert len(stopped) >= 8, [t.state_reason for t in tune_run.trials]
    for trial in stopped:
        assert trial.state == common_pb2.CANCELLED
        assert trial.state_reason.startswith("stopped by ASHA at training_iteration ")
    assert fifo.num_errors == asha.num_errors == 0
    assert all(t.state == common_pb2.SUCCEEDED for t in client.get_tune("cancer-fifo").trials)
    # Less work: boosting rounds trained by all trials together.
    assert _rounds(asha) < 0.75 * _rounds(fifo), (_rounds(asha), _rounds(fifo))
    best_asha = asha.get_best_result().metrics["valid-logloss"]
    best_fifo = fifo.get_best_result().metrics["valid-logloss"]
    assert best_asha <= best_fifo * 1.05, (best_asha, best_fifo)


def test_result_grid_reads_like_ray_tunes(searches):
    asha, _ = searches
    df = asha.get_dataframe()
    assert len(df) == 16
    assert {"config/params/eta", "config/params/max_depth", "valid-logloss"} <= set(df.columns)
    best = asha.get_best_result()
    assert best.metrics["valid-logloss"] == pytest.approx(df["valid-logloss"].min())
    assert 1e-3 <= best.config["params"]["eta"] <= 0.5 and 2 <= best.config["params"]["max_depth"] < 9
    assert best.checkpoint is not None


def test_the_best_trial_is_served_under_the_search_name(searches, cancer_data):
    from trainwire import PredictorClient
    from trainwire.xgboost import XGBoostPredictor
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    best = searches[0].get_best_result()
    features = cancer_data[1].drop(columns=["target"])
    local = XGBoostPredictor.from_checkpoint(best.checkpoint).predict(features)
    server = PredictorThread(PredictorSettings(port=0, store=best.path.split("/runs/")[0]))
    address = server.start()
    try:
        with PredictorClient(address) as predictor:
            served = predictor.predict("cancer-asha", features)
    finally:
        server.stop()
    np.testing.assert_allclose(served["predictions"], local["predictions"], rtol=1e-6)


def _loop(config):
    if config["lr"] == 0.5:
        raise ValueError("this learning rate diverges")
    for step in range(3):
        train.report({"loss": config["lr"] * (3 - step), "step": step})


def test_torch_grid_reports_every_trial_and_a_raising_trial_is_an_error(coordinator):
    trainer = TorchTrainer(_loop, train_loop_config={"lr": 0.0}, scaling_config=ScalingConfig(num_workers=2))
    grid = Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": tune.grid_search([0.01, 0.1, 0.5])}},
        tune_config=TuneConfig(metric="loss", mode="min"),
        run_config=RunConfig(name="torch-grid", verbose=0),
    ).fit()
    assert len(grid) == 3
    assert grid.num_errors == 1 and "this learning rate diverges" in str(grid.errors[0])
    assert grid.num_terminated == 2
    df = grid.get_dataframe()
    assert len(df) == 3
    assert sorted(df["config/train_loop_config/lr"]) == [0.01, 0.1, 0.5]
    ok = df[df["config/train_loop_config/lr"] != 0.5]
    assert list(ok["training_iteration"]) == [3, 3]
    assert grid.get_best_result().config["train_loop_config"]["lr"] == 0.01


def _stub(client) -> tune_pb2_grpc.TunerStub:
    return tune_pb2_grpc.TunerStub(client.channel)


def _xgb_request(client, cancer_data) -> tune_pb2.TuneRequest:
    trainer = XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=4,
        datasets={"train": cancer_data[0], "valid": cancer_data[1]},
    )
    return tune_pb2.TuneRequest(trainer=trainer.build_request(client))


def _values(*items) -> struct_pb2.ListValue:
    values = struct_pb2.ListValue()
    values.extend(items)
    return values


@pytest.mark.parametrize(
    ("domain", "field"),
    [
        (tune_pb2.Domain(sampler="gaussian_process"), "search_space[0].domain.sampler"),
        (tune_pb2.Domain(sampler="grid_search"), "search_space[0].domain.values"),
        (tune_pb2.Domain(sampler="uniform", lower=1, upper=0), "search_space[0].domain.upper"),
        (tune_pb2.Domain(sampler="loguniform", lower=0, upper=1), "search_space[0].domain.lower"),
    ],
    ids=["unknown-sampler", "empty-grid", "empty-range", "log-of-zero"],
)
def test_a_bad_search_space_is_invalid_argument_naming_the_field(client, cancer_data, domain, field):
    request = _xgb_request(client, cancer_data)
    request.search_space.add(path=["params", "eta"], domain=domain)
    with pytest.raises(grpc.RpcError) as err:
        _stub(client).Tune(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(err.value) == field


def test_an_impossible_scaling_config_is_invalid_argument(client, cancer_data):
    with pytest.raises(InvalidArgumentError) as err:
        Tuner(
            _cancer_trainer(cancer_data),
            param_space={"scaling_config": ScalingConfig(num_workers=64)},
            tune_config=TuneConfig(metric="valid-logloss", mode="min"),
        ).fit()
    assert err.value.field == "param_space.scaling_config.num_workers"


def test_a_metric_no_trial_reports_fails_the_search_naming_the_field(client, cancer_data):
    request = _xgb_request(client, cancer_data)
    request.search_space.add(path=["params", "eta"], domain=tune_pb2.Domain(sampler="grid_search", values=_values(0.1)))
    request.tune_config.metric, request.tune_config.mode = "valid-auc", "max"
    started = _stub(client).Tune(request)
    ended = list(_stub(client).WatchTune(tune_pb2.GetTuneRequest(tune_id=started.tune_id)))[-1]
    assert ended.state == common_pb2.FAILED
    assert ended.error_field == "tune_config.metric"
    assert "'valid-auc' is not among the metrics" in ended.state_reason and "valid-logloss" in ended.state_reason
    with pytest.raises(tune.TuneError) as err:  # the SDK's Tuner.fit says the same
        Tuner.restore(started.tune_id).fit()
    assert err.value.field == "tune_config.metric"


def test_unknown_search_is_not_found(client):
    with pytest.raises(grpc.RpcError) as err:
        _stub(client).GetTune(tune_pb2.GetTuneRequest(tune_id="no-such-search"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_optuna_tpe_searches_in_the_coordinator_repeatably(coordinator, cancer_data):
    from trainwire.tune.search.optuna import OptunaSearch

    def search(name: str):
        trainer = XGBoostTrainer(
            params=PARAMS,
            label_column="target",
            num_boost_round=8,
            datasets={"train": cancer_data[0], "valid": cancer_data[1]},
        )
        return Tuner(
            trainer,
            param_space={"params": {"eta": tune.loguniform(1e-3, 0.5), "max_depth": tune.choice([2, 4, 6])}},
            tune_config=TuneConfig(
                metric="valid-logloss",
                mode="min",
                num_samples=6,
                search_alg=tune.search.ConcurrencyLimiter(OptunaSearch(seed=3), max_concurrent=1),
            ),
            run_config=RunConfig(name=name, verbose=0),
        ).fit()

    first, second = search("optuna-a"), search("optuna-b")
    assert len(first) == 6 and first.num_errors == 0
    # One trial at a time: TPE sees the same history in the same order, so the seed repeats the search.
    assert [r.config for r in first] == [r.config for r in second]
    assert len({r.config["params"]["eta"] for r in first}) == 6
    assert {r.config["params"]["max_depth"] for r in first} <= {2, 4, 6}


def _objective(config, offset=0.0):
    for step in range(1, 4):
        tune.report({"score": (config["x"] - 3) ** 2 / step + offset})


def test_a_function_trainable_runs_as_in_ray_tune(coordinator):
    grid = Tuner(
        tune.with_resources(tune.with_parameters(_objective, offset=1.0), {"cpu": 0.5}),
        param_space={"x": tune.grid_search([1, 3, 5]), "twice": tune.sample_from(lambda spec: spec.config.x * 2)},
        tune_config=TuneConfig(metric="score", mode="min"),
        run_config=RunConfig(name="function-trainable", verbose=0),
    ).fit()
    assert len(grid) == 3 and grid.num_errors == 0
    best = grid.get_best_result()
    # The function's own config, as Ray shows it; sample_from saw it too (run as a task on the cluster).
    assert best.config == {"x": 3, "twice": 6}
    assert best.metrics["score"] == pytest.approx(1.0)
    df = grid.get_dataframe()
    assert sorted(df["config/x"]) == [1, 3, 5] and list(df["training_iteration"]) == [3, 3, 3]


def test_the_cli_lists_shows_and_watches_a_search(searches, coordinator_address):
    from tests.client.test_cli import _cli

    listed = _cli("tunes", "list", address=coordinator_address)
    assert listed.returncode == 0, listed.stderr
    assert "cancer-asha" in listed.stdout and "SUCCEEDED" in listed.stdout
    shown = json.loads(_cli("tunes", "show", "cancer-asha", address=coordinator_address).stdout)
    assert len(shown["trials"]) == 16 and shown["state"] == "SUCCEEDED"
    watched = _cli("tunes", "watch", "cancer-fifo", address=coordinator_address)
    assert watched.returncode == 0 and "SUCCEEDED" in watched.stdout
