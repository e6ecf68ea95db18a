"""XGBoostTrainer / LightGBMTrainer with a training function (Ray >= 2.10's form), on two workers.

The loops are Ray's documented ones with trainwire's imports: each worker reads its shard,
builds its DMatrix / Dataset and calls ``xgboost.train`` / ``lightgbm.train`` with a
``RayTrainReportCallback``. The assertions show the two workers trained one model together
(the trees' root statistics count every row of both shards), that every round was reported,
and that the checkpoint loads with ``get_model`` and serves through the framework's Predictor.
"""

from __future__ import annotations

import json
import re

import grpc
import numpy as np
import pandas as pd
import pytest

from trainwire import CheckpointConfig, RunConfig, ScalingConfig
from trainwire_core.v1 import coordinator_pb2_grpc

pytestmark = pytest.mark.timeout(240)

ROWS = 400  # even: each of the two workers gets exactly half
ROUNDS = 6


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS + 100, 4))
    df = pd.DataFrame(x, columns=[f"x{i}" for i in range(4)])
    df["y"] = 3 * x[:, 0] - 2 * x[:, 1] + 0.5 * x[:, 2] * x[:, 3] + rng.normal(scale=0.1, size=len(df))
    return df.iloc[:ROWS].reset_index(drop=True), df.iloc[ROWS:].reset_index(drop=True)


def xgboost_loop(config: dict) -> None:
    import xgboost

    from trainwire import train
    from trainwire.xgboost import RayTrainReportCallback

    train_df = train.get_dataset_shard("train").materialize().to_pandas()
    eval_df = train.get_dataset_shard("validation").materialize().to_pandas()
    dtrain = xgboost.DMatrix(train_df.drop(columns=["y"]), label=train_df["y"])
    deval = xgboost.DMatrix(eval_df.drop(columns=["y"]), label=eval_df["y"])
    # What the collective sees: its size, and the rows of every worker summed through it.
    world = xgboost.collective.get_world_size()
    summed = xgboost.collective.allreduce(np.array([len(train_df)], dtype=np.float64), xgboost.collective.Op.SUM)
    rows = float(summed[0])

    def with_collective(metrics: dict) -> dict:
        return {**metrics, "collective_world_size": world, "collective_rows": rows, "shard_rows": len(train_df)}

    xgboost.train(
        config["params"],
        dtrain,
        num_boost_round=config["rounds"],
        evals=[(dtrain, "train"), (deval, "validation")],
        callbacks=[RayTrainReportCallback(frequency=2, results_postprocessing_fn=with_collective)],
    )


@pytest.fixture(scope="module")
def xgb_result(coordinator, data):
    from trainwire.xgboost import XGBoostConfig, XGBoostTrainer

    train_df, valid_df = data
    return XGBoostTrainer(
        xgboost_loop,
        train_loop_config={
            "params": {"objective": "reg:squarederror", "tree_method": "hist", "max_depth": 3, "nthread": 1},
            "rounds": ROUNDS,
        },
        xgboost_config=XGBoostConfig(),
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": train_df, "validation": valid_df},
        run_config=RunConfig(name="xgb-function-form", verbose=0),
    ).fit()


def test_xgboost_reports_every_round_as_eval_dash_metric(xgb_result):
    df = xgb_result.metrics_dataframe
    assert len(df) == ROUNDS
    assert df["train-rmse"].notna().all() and df["validation-rmse"].notna().all()
    assert df["train-rmse"].iloc[-1] < df["train-rmse"].iloc[0]


def test_xgboost_workers_train_together_in_one_collective(xgb_result, data):
    from trainwire.xgboost import RayTrainReportCallback

    train_df, _ = data
    metrics = xgb_result.metrics
    assert metrics["collective_world_size"] == 2
    assert metrics["collective_rows"] == ROWS and metrics["shard_rows"] == ROWS // 2
    booster = RayTrainReportCallback.get_model(xgb_result.checkpoint)
    assert booster.num_boosted_rounds() == ROUNDS
    # Squared error has a hessian of 1 per row: the first tree's root covers every row of both shards.
    root = booster.get_dump(with_stats=True)[0].splitlines()[0]
    assert float(re.search(r"cover=([\d.]+)", root).group(1)) == ROWS
    # The reported training error is over both shards: it is the model's error on all the rows.
    predictions = booster.inplace_predict(train_df.drop(columns=["y"]))
    rmse = float(np.sqrt(np.mean((predictions - train_df["y"].to_numpy()) ** 2)))
    assert metrics["train-rmse"] == pytest.approx(rmse, rel=1e-4)


def _served(store, result):
    """The framework and Predictor the predictor service loads for the run's latest checkpoint."""
    from trainwire_predictor.model_repository import load_predictor

    return load_predictor(store, result.run_id, result.checkpoint.uri.rstrip("/").rsplit("/", 1)[-1])


def test_xgboost_checkpoints_every_frequency_rounds_and_serves(xgb_result, data, store):
    from trainwire.xgboost import RayTrainReportCallback, XGBoostPredictor

    _, valid_df = data
    # frequency=2 over 6 rounds: after rounds 2, 4 and 6; the end adds no second copy of round 6.
    rounds = sorted(RayTrainReportCallback.get_model(c).num_boosted_rounds() for c, _ in xgb_result.best_checkpoints)
    assert rounds == [2, 4, 6]
    features = valid_df.drop(columns=["y"])
    booster = RayTrainReportCallback.get_model(xgb_result.checkpoint)
    framework, predictor = _served(store, xgb_result)
    assert framework == "xgboost" and isinstance(predictor, XGBoostPredictor)
    np.testing.assert_allclose(
        np.asarray(predictor.predict(features)["predictions"]), booster.inplace_predict(features)
    )


def lightgbm_loop(config: dict) -> None:
    import lightgbm

    from trainwire import train
    from trainwire.lightgbm import RayTrainReportCallback, get_network_params, normalize_pandas_for_lightgbm

    train_df = normalize_pandas_for_lightgbm(train.get_dataset_shard("train").materialize().to_pandas())
    eval_df = normalize_pandas_for_lightgbm(train.get_dataset_shard("validation").materialize().to_pandas())
    network = get_network_params()
    params = {
        **config["params"],
        "tree_learner": "data_parallel",
        "pre_partition": True,
        **network,
    }
    train_set = lightgbm.Dataset(train_df.drop(columns=["y"]), label=train_df["y"])
    eval_set = lightgbm.Dataset(eval_df.drop(columns=["y"]), label=eval_df["y"], reference=train_set)

    def with_network(metrics: dict) -> dict:
        return {**metrics, "num_machines": network["num_machines"], "shard_rows": len(train_df)}

    lightgbm.train(
        params,
        train_set,
        num_boost_round=config["rounds"],
        valid_sets=[eval_set],
        valid_names=["validation"],
        callbacks=[RayTrainReportCallback(metrics={"loss": "validation-l2"}, results_postprocessing_fn=with_network)],
    )


@pytest.fixture(scope="module")
def lgb_result(coordinator, data):
    from trainwire.lightgbm import LightGBMTrainer

    train_df, valid_df = data
    return LightGBMTrainer(
        lightgbm_loop,
        train_loop_config={"params": {"objective": "regression", "verbose": -1, "num_threads": 1}, "rounds": ROUNDS},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": train_df, "validation": valid_df},
        run_config=RunConfig(name="lgb-function-form", verbose=0, checkpoint_config=CheckpointConfig(num_to_keep=1)),
    ).fit()


def test_lightgbm_workers_build_each_tree_from_both_shards(lgb_result):
    from trainwire.lightgbm import RayTrainReportCallback

    df = lgb_result.metrics_dataframe
    assert len(df) == ROUNDS and df["loss"].notna().all()  # renamed as the callback's metrics asked
    assert "validation-l2" not in df.columns
    assert lgb_result.metrics["num_machines"] == 2 and lgb_result.metrics["shard_rows"] == ROWS // 2
    booster = RayTrainReportCallback.get_model(lgb_result.checkpoint)
    assert booster.current_iteration() == ROUNDS
    # Data-parallel tree learning: the root of every tree counts the rows of both workers.
    assert booster.dump_model()["tree_info"][0]["tree_structure"]["internal_count"] == ROWS


def test_lightgbm_checkpoint_serves(lgb_result, data, store):
    from trainwire.lightgbm import LightGBMPredictor, RayTrainReportCallback

    _, valid_df = data
    features = valid_df.drop(columns=["y"])
    expected = RayTrainReportCallback.get_model(lgb_result.checkpoint).predict(features)
    framework, predictor = _served(store, lgb_result)
    assert framework == "lightgbm" and isinstance(predictor, LightGBMPredictor)
    np.testing.assert_allclose(np.asarray(predictor.predict(features)["predictions"]), expected)


def test_tune_integration_reports_and_checkpoints_a_function_trainable(coordinator, data):
    from trainwire import tune
    from trainwire.tune.integration.xgboost import TuneReportCallback, TuneReportCheckpointCallback

    train_df, _ = data

    def trainable(config: dict) -> None:
        import xgboost

        dtrain = xgboost.DMatrix(train_df.drop(columns=["y"]), label=train_df["y"])
        xgboost.train(
            {"objective": "reg:squarederror", "max_depth": config["max_depth"], "nthread": 1},
            dtrain,
            num_boost_round=3,
            evals=[(dtrain, "train")],
            callbacks=[TuneReportCheckpointCallback(metrics={"rmse": "train-rmse"})],
        )

    grid = tune.Tuner(
        trainable,
        param_space={"max_depth": tune.grid_search([2])},
        tune_config=tune.TuneConfig(metric="rmse", mode="min"),
        run_config=RunConfig(name="tune-xgb-callback", verbose=0),
    ).fit()
    best = grid.get_best_result()
    # As Ray's: a report per round, then the end's, with the booster (frequency=0 checkpoints only there).
    assert list(best.metrics_dataframe["rmse"].notna()) == [True] * 4
    assert best.metrics["rmse"] == best.metrics_dataframe["rmse"].iloc[2]
    assert TuneReportCheckpointCallback.get_model(best.checkpoint).num_boosted_rounds() == 3
    with pytest.raises(DeprecationWarning):
        TuneReportCallback()


# --- without Ray: the two forms, their requests and backends, the callbacks in local mode ---------------------
def test_the_two_forms_do_not_mix():
    from trainwire.lightgbm import LightGBMTrainer
    from trainwire.xgboost import XGBoostConfig, XGBoostTrainer
    from trainwire_core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as info:
        XGBoostTrainer(xgboost_loop, params={"eta": 0.1})
    assert info.value.field == "gbdt.params"
    with pytest.raises(InvalidArgumentError) as info:
        XGBoostTrainer(params={}, label_column="y", xgboost_config=XGBoostConfig())
    assert info.value.field == "xgboost_config"
    with pytest.raises(InvalidArgumentError) as info:
        LightGBMTrainer(lightgbm_loop, lightgbm_config=XGBoostConfig())
    assert info.value.field == "lightgbm_config"
    with pytest.raises(InvalidArgumentError) as info:
        XGBoostConfig(xgboost_communicator="nccl")
    assert info.value.field == "xgboost_config.xgboost_communicator"
    with pytest.raises(InvalidArgumentError) as info:
        LightGBMTrainer(params={})
    assert info.value.field == "gbdt.label_column"


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_each_form_sends_its_spec_and_gets_its_backend(framework):
    from trainwire.lightgbm import LightGBMTrainer
    from trainwire.xgboost import XGBoostTrainer
    from trainwire_coordinator.admission.fit_checks import carried_code
    from trainwire_coordinator.backends import get_backend

    trainer_cls = XGBoostTrainer if framework == "xgboost" else LightGBMTrainer
    function_form = trainer_cls(xgboost_loop, train_loop_config={"rounds": 1}).build_request(None)
    assert function_form.framework == framework and function_form.WhichOneof("trainer") == "data_parallel"
    assert function_form.data_parallel.data_config.split_all  # as Ray's GBDT trainers: every dataset is split
    assert carried_code(function_form)  # so it needs submit-code
    backend = get_backend(framework).for_request(function_form)
    assert backend.name == framework and backend.uses_ray_data and not backend.reuse_workers

    declarative = trainer_cls(params={}, label_column="y").build_request(None)
    assert declarative.WhichOneof("trainer") == "gbdt" and not carried_code(declarative)
    backend = get_backend(framework).for_request(declarative)
    assert backend.name == framework and not backend.uses_ray_data and backend.reuse_workers


def _local_rounds(result, get_model) -> list[int]:
    return sorted(
        (m.num_boosted_rounds() if hasattr(m, "num_boosted_rounds") else m.current_iteration())
        for m in (get_model(c) for c, _ in result.best_checkpoints)
    )


def test_callbacks_checkpoint_every_frequency_rounds_and_at_the_end(data, tmp_path):
    """Local mode (no Ray): the callbacks' reports and checkpoints, round by round, as Ray's."""
    from trainwire.lightgbm import LightGBMTrainer
    from trainwire.lightgbm import RayTrainReportCallback as LightGBMCallback
    from trainwire.xgboost import RayTrainReportCallback as XGBoostCallback
    from trainwire.xgboost import XGBoostTrainer

    train_df, _ = data

    def xgb_loop() -> None:
        import xgboost

        dtrain = xgboost.DMatrix(train_df.drop(columns=["y"]), label=train_df["y"])
        xgboost.train(
            {"nthread": 1},
            dtrain,
            num_boost_round=5,
            evals=[(dtrain, "train")],
            callbacks=[XGBoostCallback(frequency=3)],
        )

    def lgb_loop() -> None:
        import lightgbm

        dtrain = lightgbm.Dataset(train_df.drop(columns=["y"]), label=train_df["y"])
        lightgbm.train(
            {"verbose": -1, "num_threads": 1},
            dtrain,
            num_boost_round=5,
            valid_sets=[dtrain],
            valid_names=["train"],
            callbacks=[LightGBMCallback(frequency=2)],
        )

    local = {"scaling_config": ScalingConfig(num_workers=0)}
    xgb = XGBoostTrainer(xgb_loop, run_config=RunConfig(name="xgb", storage_path=str(tmp_path)), **local).fit()
    # XGBoost reports each round, then again after training with the last checkpoint (round 3 was one).
    assert list(xgb.metrics_dataframe["train-rmse"].notna()) == [True] * 6
    assert _local_rounds(xgb, XGBoostCallback.get_model) == [3, 5]
    lgb = LightGBMTrainer(lgb_loop, run_config=RunConfig(name="lgb", storage_path=str(tmp_path)), **local).fit()
    # LightGBM's last round is the end: rounds 2, 4 and 5 carry checkpoints, in 5 reports.
    assert len(lgb.metrics_dataframe) == 5 and lgb.metrics_dataframe["train-l2"].notna().all()
    assert _local_rounds(lgb, LightGBMCallback.get_model) == [2, 4, 5]


TOKENS = {
    "ci": {"token": "ci-token", "scopes": ["submit", "read"]},
    "alice": {"token": "alice-token", "scopes": ["submit-code", "read"]},
}


@pytest.fixture(scope="module")
def scoped_address(ray_cluster, tmp_path_factory):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    home = tmp_path_factory.mktemp("gbdt-scoped")
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    thread = CoordinatorThread(
        CoordinatorSettings(
            port=0, store=str(home / "store"), state=str(home / "db"), tokens=str(tokens), capacity_wait_s=0
        )
    )
    yield thread.start()
    thread.stop()


# Outside the scoped coordinator's store: a request that passes the scope check stops at this path.
OUTSIDE = {"train": "file:///elsewhere/train.parquet"}


def _fit(address: str, token: str, trainer) -> grpc.RpcError:
    from trainwire.client import CoordinatorClient

    client = CoordinatorClient(address, token=token)
    try:
        request = trainer.build_request(client)
    finally:
        client.close()
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            coordinator_pb2_grpc.CoordinatorStub(channel).Fit(
                request, metadata=[("authorization", f"Bearer {token}")], timeout=30
            )
    return info.value


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_the_function_form_needs_submit_code(scoped_address, framework):
    from trainwire.lightgbm import LightGBMTrainer
    from trainwire.xgboost import XGBoostTrainer

    trainer_cls = XGBoostTrainer if framework == "xgboost" else LightGBMTrainer
    loop = xgboost_loop if framework == "xgboost" else lightgbm_loop
    function_form = trainer_cls(loop, train_loop_config={"rounds": 1}, datasets=OUTSIDE)
    error = _fit(scoped_address, "ci-token", function_form)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "submit-code" in error.details()
    # With submit-code the same request passes the scope check and stops at the path.
    error = _fit(scoped_address, "alice-token", function_form)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "datasets[train]" in error.details()
    # The declarative form carries no code: a submit token gets as far.
    declarative = trainer_cls(params={}, label_column="y", datasets=OUTSIDE)
    error = _fit(scoped_address, "ci-token", declarative)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "datasets[train]" in error.details()
