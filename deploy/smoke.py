"""A deployment smoke test: an XGBoost fit on the cluster, then predictions from every predictor replica.

Run it from a client host of a deployment (compose, the twin's ``client`` namespace):

    TRAINWIRE_ADDRESS=coordinator:50051 python deploy/smoke.py --predictor predictor-1:8001 --predictor predictor-2:8001

Prints one JSON line with the run and what each replica answered; exits
non-zero when a replica's answers differ from the in-process predictor's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import trainwire
from trainwire import CheckpointConfig, PredictorClient, RunConfig, ScalingConfig
from trainwire.client import CoordinatorClient
from trainwire.xgboost import XGBoostPredictor, XGBoostTrainer
from trainwire_core.v1 import common_pb2


def _predict(address: str, model: str, features, timeout_s: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Asks one replica, retrying while it has not yet seen the committed checkpoint."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with PredictorClient(address) as client:
                return client.predict(model, features)["predictions"].to_numpy()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictor", action="append", default=[], help="host:port of a predictor replica")
    parser.add_argument("--name", default="smoke")
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args(argv)

    df = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    train_df, valid_df = train_test_split(df, test_size=0.3, random_state=0)

    trainwire.init()  # TRAINWIRE_ADDRESS
    started = time.monotonic()
    result = XGBoostTrainer(
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        label_column="target",
        num_boost_round=20,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=args.num_workers),
        run_config=RunConfig(name=args.name, checkpoint_config=CheckpointConfig(num_to_keep=2), verbose=0),
    ).fit()
    fit_s = time.monotonic() - started
    features = valid_df.drop(columns=["target"])
    local = XGBoostPredictor.from_checkpoint(result.checkpoint).predict(features)["predictions"].to_numpy()

    report = {
        "run_id": result.run_id,
        "fit_s": round(fit_s, 1),
        "valid_logloss": result.metrics.get("valid-logloss"),
        "checkpoint": result.checkpoint.uri,
        "predictors": {},
    }
    coordinator = CoordinatorClient(os.environ["TRAINWIRE_ADDRESS"])
    report["state"] = common_pb2.RunState.Name(coordinator.get_run(result.run_id).state)
    coordinator.close()
    ok = True
    for address in args.predictor:
        served = _predict(address, args.name, features, timeout_s=60)
        same = bool(np.allclose(served, local))
        accuracy = float(((served > 0.5) == valid_df["target"].to_numpy()).mean())
        report["predictors"][address] = {"rows": len(served), "same_as_local": same, "accuracy": round(accuracy, 3)}
        ok = ok and same
    trainwire.shutdown()
    print(json.dumps(report), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
