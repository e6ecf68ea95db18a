"""``LightGBMTrainer``, as ``ray.train.lightgbm.LightGBMTrainer``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.data_config import DataConfig
from trainwire.gbdt import GBDTTrainer
from trainwire.lightgbm.checkpoint import LightGBMCheckpoint
from trainwire.lightgbm.config import LightGBMConfig
from trainwire.lightgbm.framework import FRAMEWORK


class LightGBMTrainer(GBDTTrainer):
    """Data-parallel LightGBM across ``scaling_config.num_workers`` workers, as ``ray.train.lightgbm``.

    With a ``train_loop_per_worker`` (Ray >= 2.10), every worker runs it knowing the run's
    LightGBM network: ``get_network_params()`` gives ``lightgbm.train`` the params that make the
    workers build each tree together::

        def train_fn_per_worker(config):
            df = train.get_dataset_shard("train").materialize().to_pandas()
            params = {"objective": "regression", "tree_learner": "data_parallel", "pre_partition": True,
                      **trainwire.train.lightgbm.get_network_params()}
            lightgbm.train(params, lightgbm.Dataset(df.drop(columns=["y"]), label=df["y"]),
                           callbacks=[RayTrainReportCallback()])

    Without one it is declarative (Ray 2.4's form): ``params``, ``label_column``,
    ``num_boost_round`` and ``dmatrix_params`` (passed to ``lightgbm.Dataset``).

    Args:
        train_loop_per_worker: The loop each worker runs (taking ``config`` or nothing), or None.
        train_loop_config: Passed to the loop.
        lightgbm_config: The network's options (none yet, as Ray's).
        scaling_config: Workers and resources.
        run_config: Name, checkpoint and failure policies.
        datasets: Name -> pandas DataFrame, Arrow table, Ray Dataset or parquet/csv URI.
        dataset_config: Which datasets are split across the workers (default: all).
        validation_config: Ray Train V2's asynchronous validation.
        metadata: Free-form JSON metadata recorded with the run.
        resume_from_checkpoint: Start from this checkpoint (``train.get_checkpoint()`` in the loop).
        label_column: Declarative form: the label column.
        params: Declarative form: ``lightgbm.train`` params.
        num_boost_round: Declarative form: boosting rounds (default 10).
        dmatrix_params: Declarative form: extra ``lightgbm.Dataset`` arguments.
        **kwargs: ``preprocessor``, as BaseTrainer.
    """

    framework = FRAMEWORK.name
    checkpoint_cls = LightGBMCheckpoint
    backend_config_cls = LightGBMConfig
    backend_config_arg = "lightgbm_config"

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str | None = None,
        *,
        train_loop_config: dict[str, Any] | None = None,
        lightgbm_config: LightGBMConfig | None = None,
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
            backend_config=lightgbm_config,
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
        return LightGBMCheckpoint(checkpoint.path, checkpoint.filesystem).get_model()
