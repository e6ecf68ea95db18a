"""The main job: train XGBoost on two workers, then serve predictions from the checkpoint.

Runs on the embedded defaults: trainwire.init() starts a local coordinator
(local Ray, SQLite metadata, a store under ~/.trainwire).
"""

from __future__ import annotations

from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import trainwire
from trainwire import CheckpointConfig, RunConfig, ScalingConfig
from trainwire.xgboost import XGBoostTrainer


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

    booster = XGBoostTrainer.get_model(result.checkpoint)
    import xgboost

    features = valid_df.drop(columns=["target"])
    accuracy = ((booster.predict(xgboost.DMatrix(features)) > 0.5) == valid_df["target"]).mean()
    print(f"valid accuracy: {accuracy:.3f}")
    trainwire.shutdown()


if __name__ == "__main__":
    main()
