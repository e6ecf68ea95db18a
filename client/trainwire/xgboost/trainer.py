"""``XGBoostTrainer``, as ``ray.train.xgboost.XGBoostTrainer``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.data_config import DataConfig
from trainwire.gbdt import GBDTTrainer
from trainwire.xgboost.checkpoint import XGBoostCheckpoint
from trainwire.xgboost.config import XGBoostConfig
from trainwire.xgboost.framework import FRAMEWORK


class XGBoostTrainer(GBDTTrainer):
    """Distributed XGBoost across ``scaling_config.num_workers`` workers, as ``ray.train.xgboost``.

    With a ``train_loop_per_worker`` (Ray >= 2.10), every worker runs it inside XGBoost's
    collective, so its ``xgboost.train`` call trains data-parallel with the other workers'; a
    ``RayTrainReportCallback`` reports each round and checkpoints the booster::

        def train_fn_per_worker(config):
            df = train.get_dataset_shard("train").materialize().to_pandas()
            dtrain = xgboost.DMatrix(df.drop(columns=["y"]), label=df["y"])
            xgboost.train(config["params"], dtrain, num_boost_round=10,
                          evals=[(dtrain, "train")], callbacks=[RayTrainReportCallback()])

        XGBoostTrainer(train_fn_per_worker, train_loop_config={"params": {...}},
                       scaling_config=ScalingConfig(num_workers=2), datasets={"train": df}).fit()

    Without one it is declarative (Ray 2.4's form): ``params``, ``label_column``,
    ``num_boost_round`` and ``dmatrix_params`` (passed to ``xgboost.DMatrix``).

    Args:
        train_loop_per_worker: The loop each worker runs (taking ``config`` or nothing), or None.
        train_loop_config: Passed to the loop.
        xgboost_config: The collective's options.
        scaling_config: Workers and resources.
        run_config: Name, checkpoint and failure policies.
        datasets: Name -> pandas DataFrame, Arrow table, Ray Dataset or parquet/csv URI.
        dataset_config: Which datasets are split across the workers (default: all).
        validation_config: Ray Train V2's asynchronous validation.
        metadata: Free-form JSON metadata recorded with the run.
        resume_from_checkpoint: Start from this checkpoint (``train.get_checkpoint()`` in the loop).
        label_column: Declarative form: the label column.
        params: Declarative form: ``xgboost.train`` params.
        num_boost_round: Declarative form: boosting rounds (default 10).
        dmatrix_params: Declarative form: extra ``xgboost.DMatrix`` arguments.
        **kwargs: ``preprocessor``, as BaseTrainer.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = XGBoostCheckpoint
    backend_config_cls = XGBoostConfig
    backend_config_arg = "xgboost_config"

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str | None = None,
        *,
        train_loop_config: dict[str, Any] | None = None,
        xgboost_config: XGBoostConfig | None = None,
        scaling_config: Any = None,
        run_config: Any = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        validation_config: Any = None,
        metadata: dict[str, Any] | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        label_column: str | None = None,
        params: dict[str, Any] | None = None,
        num_boost_round: int | None = None,
        dmatrix_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=xgboost_config,
            dataset_config=dataset_config,
            validation_config=validation_config,
            label_column=label_column,
            params=params,
            num_boost_round=num_boost_round,
            dmatrix_params=dmatrix_params,
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            metadata=metadata,
            resume_from_checkpoint=resume_from_checkpoint,
            **kwargs,
        )

    @staticmethod
    def get_model(checkpoint: Checkpoint) -> Any:
        """The booster a checkpoint of either form holds."""
        return XGBoostCheckpoint.get_model(checkpoint)
