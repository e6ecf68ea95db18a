"""What XGBoost and LightGBM share: the trainer (both of its forms) and the report callbacks' logic.

``XGBoostTrainer`` / ``LightGBMTrainer`` take either form of Ray's:

- a ``train_loop_per_worker`` (Ray >= 2.10): the loop reads ``get_dataset_shard``, builds its
  DMatrix or Dataset and calls ``xgboost.train`` / ``lightgbm.train`` with a
  ``RayTrainReportCallback``; it is shipped pickled, as every function trainer's, so it needs
  the ``submit-code`` scope;
- declarative (Ray 2.4's form): ``params``, ``label_column``, ``num_boost_round``; no code travels.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from trainwire.checkpoint import Checkpoint
from trainwire.data_config import DataConfig
from trainwire.trainer import BaseTrainer, DataParallelTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import to_struct
from trainwire_core.v1 import coordinator_pb2

# Arguments of each form; naming one of the other form is refused, not silently dropped.
_DECLARATIVE_ARGS = ("label_column", "params", "num_boost_round", "dmatrix_params")
_FUNCTION_ARGS = ("train_loop_config", "dataset_config", "validation_config")


class GBDTTrainer(DataParallelTrainer):
    """Trains a boosted-tree model data-parallel: the user's loop, or declared params.

    Subclasses set ``framework``, ``checkpoint_cls``, the ``backend_config_cls`` (XGBoostConfig,
    LightGBMConfig) and ``backend_config_arg``, its argument's name.

    Args:
        train_loop_per_worker: The loop each worker runs (Ray >= 2.10); None for the declarative form.
        train_loop_config: Passed to the loop.
        backend_config: The framework's config (``xgboost_config`` / ``lightgbm_config``).
        dataset_config: Which datasets are split across the workers; default: all of them, as Ray's
            GBDT trainers do (evaluation metrics are reduced across the workers).
        validation_config: Ray Train V2's asynchronous validation.
        label_column: Declarative form: name of the label column in every dataset.
        params: Declarative form: the library's training params.
        num_boost_round: Declarative form: boosting rounds (default 10).
        dmatrix_params: Declarative form: extra arguments of the library's dataset constructor.
        **kwargs: ``scaling_config``, ``run_config``, ``datasets``, ``resume_from_checkpoint``,
            ``metadata``, ``preprocessor``, as BaseTrainer.
    """

    backend_config_cls: type = object
    backend_config_arg = ""

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any] | str | None = None,
        *,
        train_loop_config: dict[str, Any] | None = None,
        backend_config: Any = None,
        dataset_config: DataConfig | dict[str, Any] | None = None,
        validation_config: Any = None,
        label_column: str | None = None,
        params: dict[str, Any] | None = None,
        num_boost_round: int | None = None,
        dmatrix_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        given = {
            "train_loop_config": train_loop_config,
            "dataset_config": dataset_config,
            "validation_config": validation_config,
            self.backend_config_arg: backend_config,
            "label_column": label_column,
            "params": params,
            "num_boost_round": num_boost_round,
            "dmatrix_params": dmatrix_params,
        }
        if train_loop_per_worker is None:
            self._init_declarative(given, **kwargs)
            return
        for name in _DECLARATIVE_ARGS:
            if given[name] is not None:
                raise InvalidArgumentError(
                    f"{name} belongs to the declarative form (no train_loop_per_worker); with a training "
                    "function, pass what it needs in train_loop_config",
                    field=f"gbdt.{name}",
                )
        config = backend_config if backend_config is not None else self.backend_config_cls()
        if not isinstance(config, self.backend_config_cls):
            raise InvalidArgumentError(
                f"{self.backend_config_arg} must be a {self.backend_config_cls.__name__}, got {type(config).__name__}",
                field=self.backend_config_arg,
            )
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=dataclasses.asdict(config),
            dataset_config=dataset_config if dataset_config is not None else DataConfig(datasets_to_split="all"),
            validation_config=validation_config,
            **kwargs,
        )

    def _init_declarative(self, given: dict[str, Any], **kwargs: Any) -> None:
        for name in (*_FUNCTION_ARGS, self.backend_config_arg):
            if given[name] is not None:
                raise InvalidArgumentError(
                    f"{name} needs a train_loop_per_worker (the declarative form takes params, label_column, "
                    "num_boost_round)",
                    field=name,
                )
        BaseTrainer.__init__(self, **kwargs)
        label_column, num_boost_round = given["label_column"], given["num_boost_round"]
        num_boost_round = 10 if num_boost_round is None else num_boost_round
        if not label_column:
            raise InvalidArgumentError(
                "label_column is required (or pass a train_loop_per_worker)", field="gbdt.label_column"
            )
        if isinstance(num_boost_round, bool) or not isinstance(num_boost_round, int) or num_boost_round < 1:
            raise InvalidArgumentError(
                f"num_boost_round must be an integer >= 1, got {num_boost_round!r}",
                field="gbdt.num_boost_round",
            )
        # Only the declarative form has these (a Tuner's param_space checks which keys apply).
        self.train_loop_per_worker = None
        self.params = given["params"] or {}
        self.label_column = label_column
        self.num_boost_round = num_boost_round
        self.dmatrix_params = given["dmatrix_params"] or {}

    @property
    def declarative(self) -> bool:
        """True for the declarative form (no training function)."""
        return self.train_loop_per_worker is None

    def _code_objects(self) -> list[Any]:
        return BaseTrainer._code_objects(self) if self.declarative else super()._code_objects()

    def _total_iterations(self) -> int | None:
        return self.num_boost_round if self.declarative else None

    def _fill_spec(self, request: coordinator_pb2.FitRequest) -> None:
        if not self.declarative:
            super()._fill_spec(request)
            return
        request.gbdt.CopyFrom(
            coordinator_pb2.GBDTSpec(
                params=to_struct(self.params, "gbdt.params"),
                label_column=self.label_column,
                num_boost_round=self.num_boost_round,
                dmatrix_params=to_struct(self.dmatrix_params, "gbdt.dmatrix_params"),
            )
        )


def flatten_evals(evals: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``{"validation": {"rmse": v}}`` as ``{"validation-rmse": v}`` (Ray's ``<eval>-<metric>`` names)."""
    return {f"{data}-{metric}": value for data, by_metric in evals.items() for metric, value in by_metric.items()}


class GBDTReportCallback:
    """What Ray's XGBoost and LightGBM report callbacks share: which metrics, when to checkpoint, how.

    Subclasses set ``CHECKPOINT_NAME`` and ``_report`` (``train.report`` or ``tune.report``). Only
    rank 0 saves the model (a Tune trial's one process is rank 0).

    Args:
        metrics: Metric names to report (a name, a list, or ``{reported_name: library_name}``);
            default: all, named ``<eval>-<metric>``.
        filename: The model's file name in the checkpoint.
        frequency: Checkpoint every this many rounds (0: never during training).
        checkpoint_at_end: Checkpoint after the last round.
        results_postprocessing_fn: Turns the metrics dict into the one reported.
    """

    CHECKPOINT_NAME = ""

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str = "",
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 0:
            raise InvalidArgumentError(f"frequency must be an integer >= 0, got {frequency!r}", field="frequency")
        self._metrics = [metrics] if isinstance(metrics, str) else metrics
        self._filename = filename or self.CHECKPOINT_NAME
        self._frequency = frequency
        self._checkpoint_at_end = checkpoint_at_end
        self._results_postprocessing_fn = results_postprocessing_fn

    def _get_report_dict(self, flat: dict[str, Any]) -> dict[str, Any]:
        if not self._metrics:
            report = dict(flat)
        elif isinstance(self._metrics, dict):
            report = {key: flat[name] for key, name in self._metrics.items()}
        else:
            report = {key: flat[key] for key in self._metrics}
        if self._results_postprocessing_fn:
            report = self._results_postprocessing_fn(report)
        return report

    def _report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        raise NotImplementedError

    def _report_metrics(self, report_dict: dict[str, Any]) -> None:
        self._report(report_dict, None)

    def _save_and_report_checkpoint(self, report_dict: dict[str, Any], model: Any) -> None:
        from trainwire import train

        if train.get_context().get_world_rank() != 0:
            # Every rank holds the same model: one copy is the checkpoint. Every rank still
            # reports, so each has reported as often as the others.
            self._report(report_dict, None)
            return
        with tempfile.TemporaryDirectory() as directory:
            model.save_model(os.path.join(directory, self._filename))
            self._report(report_dict, Checkpoint.from_directory(directory))
