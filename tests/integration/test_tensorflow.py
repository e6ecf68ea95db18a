"""TensorflowTrainer end to end: MultiWorkerMirroredStrategy across two workers."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pandas as pd
import pytest

from trainwire import Checkpoint, RunConfig, ScalingConfig, train
from trainwire.tensorflow import TensorflowCheckpoint, TensorflowPredictor, TensorflowTrainer

pytestmark = pytest.mark.timeout(300)

FEATURES = ["a", "b", "c", "d"]
EPOCHS = 3


@pytest.fixture(scope="module")
def regression_data() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    df = pd.DataFrame(x, columns=FEATURES)
    df["y"] = x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + 0.1
    return df


def keras_loop(config: dict) -> None:
    """Fits a linear Keras model; every rank writes what it saw into the final checkpoint."""
    import tensorflow as tf

    from trainwire.tensorflow.keras import ReportCheckpointCallback

    ctx = train.get_context()
    rank = ctx.get_world_rank()
    tf_config = json.loads(os.environ["TF_CONFIG"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    df = train.get_dataset_shard("train").materialize().to_pandas()
    data = tf.data.Dataset.from_tensor_slices((df[FEATURES].to_numpy("float32"), df["y"].to_numpy("float32")))
    options = tf.data.Options()
    # Each worker already has its own shard: Keras must not shard it again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = data.batch(8).with_options(options)
    tf.keras.utils.set_random_seed(rank)  # different init per rank: the strategy must sync them
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = model.fit(data, epochs=config["epochs"], verbose=0, callbacks=[ReportCheckpointCallback()])
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as scratch:
        summary = {
            "rank": rank,
            "world_size": ctx.get_world_size(),
            "tf_workers": len(tf_config["cluster"]["worker"]),
            "tf_index": tf_config["task"]["index"],
            "replicas": strategy.num_replicas_in_sync,
            "keras": type(model).__module__.split(".")[0],
            "losses": history.history["loss"],
            "weights": [w.flatten().tolist() for w in model.get_weights()],
        }
        with open(os.path.join(d, f"worker_{rank}.json"), "w") as f:
            json.dump(summary, f)
        # Every rank saves (saving may be collective under the strategy); rank 0's copy is kept.
        model.save(os.path.join(d if rank == 0 else scratch, "model.keras"))
        train.report({"loss": history.history["loss"][-1], "final": 1}, checkpoint=Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def tf_result(coordinator, regression_data):
    return TensorflowTrainer(
        keras_loop,
        train_loop_config={"epochs": EPOCHS},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": regression_data},
        run_config=RunConfig(name="keras-linear", verbose=0),
    ).fit()


def _summaries(checkpoint: Checkpoint) -> list[dict]:
    with checkpoint.as_directory() as d:
        return [json.load(open(os.path.join(d, f"worker_{r}.json"))) for r in (0, 1)]


def test_two_workers_form_one_tf_cluster(tf_result):
    s0, s1 = _summaries(tf_result.checkpoint)
    assert (s0["rank"], s1["rank"]) == (0, 1)
    assert (s0["tf_index"], s1["tf_index"]) == (0, 1)
    assert s0["world_size"] == s1["world_size"] == 2
    assert s0["tf_workers"] == s1["tf_workers"] == 2
    assert s0["replicas"] == s1["replicas"] == 2
    assert s0["keras"] == "tf_keras"  # TF_USE_LEGACY_KERAS reached the workers


def test_weights_agree_and_loss_decreases(tf_result):
    s0, s1 = _summaries(tf_result.checkpoint)
    np.testing.assert_allclose(np.concatenate(s0["weights"]), np.concatenate(s1["weights"]), rtol=1e-6)
    assert s0["losses"][-1] < s0["losses"][0]
    # The callback reported once per epoch, then the loop reported the final checkpoint.
    frame = tf_result.metrics_dataframe
    assert len(frame) == EPOCHS + 1
    assert frame["loss"].iloc[EPOCHS - 1] < frame["loss"].iloc[0]


def test_checkpoint_loads_and_predictor_matches_the_model(tf_result, regression_data):
    model = TensorflowCheckpoint(tf_result.checkpoint.uri).get_model()
    s0, _ = _summaries(tf_result.checkpoint)
    np.testing.assert_allclose(
        np.concatenate([w.flatten() for w in model.get_weights()]), np.concatenate(s0["weights"])
    )
    rows = regression_data[FEATURES].to_numpy("float32")[:10]
    predictor = TensorflowPredictor.from_checkpoint(tf_result.checkpoint)
    out = predictor.predict(rows)
    np.testing.assert_allclose(
        out["predictions"], model.predict(rows, verbose=0)[:, 0], rtol=1e-6
    )  # numpy in, numpy out


def test_callback_checkpoints_hold_the_model(tf_result):
    callback_ckpts = [c for c, m in tf_result.best_checkpoints if "final" not in m]
    assert callback_ckpts, tf_result.best_checkpoints
    ckpt = callback_ckpts[0]
    assert ckpt.get_metadata() == {"framework": "tensorflow", "keras": "tf_keras"}
    assert len(TensorflowCheckpoint(ckpt.uri).get_model().get_weights()) == 2


def test_importing_trainwire_tensorflow_does_not_import_tensorflow():
    import subprocess
    import sys

    code = "import sys, trainwire.tensorflow; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
