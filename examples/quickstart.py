"""The main job: train XGBoost on two workers, then serve predictions from the committed checkpoint.

Runs on the embedded defaults: trainwire.init() starts a local coordinator
(local Ray, SQLite metadata, a store under ~/.trainwire); a predictor process
serves the same store over the Open Inference Protocol.

On a deployment, TRAINWIRE_ADDRESS names the coordinator and TRAINWIRE_PREDICTOR_ADDRESS
the predictors (e.g. ``dns:///predictor:8001``: round robin over every replica).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import trainwire
from trainwire import CheckpointConfig, PredictorClient, RunConfig, ScalingConfig
from trainwire.xgboost import XGBoostPredictor, XGBoostTrainer
from trainwire_predictor.settings import default_store


def start_predictor(store: str) -> tuple[subprocess.Popen, str]:
    """Starts ``trainwire predictor`` on a free port; returns the process and its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainwire_predictor", "--port", "0", "--store", store],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise RuntimeError(f"the predictor did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[-1].strip()


def main() -> None:
    df = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    train_df, valid_df = train_test_split(df, test_size=0.3, random_state=0)

    trainwire.init()
    result = XGBoostTrainer(
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        label_column="target",
        num_boost_round=50,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="cancer",
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="valid-logloss", checkpoint_score_order="min"
            ),
        ),
    ).fit()
    print(f"run {result.run_id}: valid-logloss={result.metrics['valid-logloss']:.4f}")
    print(f"checkpoint: {result.checkpoint.uri}")
    trainwire.shutdown()

    features = valid_df.drop(columns=["target"])
    local = XGBoostPredictor.from_checkpoint(result.checkpoint).predict(features)["predictions"].to_numpy()

    address = os.environ.get("TRAINWIRE_PREDICTOR_ADDRESS")
    proc = None
    if not address:
        proc, address = start_predictor(default_store())
    try:
        with PredictorClient(address) as client:
            served = client.predict("cancer", features)["predictions"].to_numpy()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    accuracy = ((served > 0.5) == valid_df["target"].to_numpy()).mean()
    print(f"predictor at {address} served {len(served)} rows of model 'cancer': accuracy {accuracy:.3f}")
    print(f"same as in-process XGBoostPredictor: {np.allclose(served, local)}")


if __name__ == "__main__":
    main()
