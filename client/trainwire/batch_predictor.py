"""``BatchPredictor``: scores a Ray Dataset with a pool of actors, as Ray AIR's ``BatchPredictor``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire.predictor import Predictor
from trainwire_core.errors import InvalidArgumentError


class _ScoringActor:
    """One scoring worker: loads the predictor once, then scores batch after batch."""

    def __init__(
        self,
        checkpoint: Checkpoint | None,
        predictor_cls: type[Predictor],
        predictor_kwargs: dict[str, Any],
        feature_columns: list[str] | None,
        keep_columns: list[str] | None,
        predict_kwargs: dict[str, Any],
    ) -> None:
        self.predictor = predictor_cls.from_checkpoint(checkpoint, **predictor_kwargs)
        self.feature_columns = feature_columns
        self.keep_columns = keep_columns
        self.predict_kwargs = predict_kwargs

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        data = batch[self.feature_columns] if self.feature_columns else batch
        if self.keep_columns and not self.feature_columns:
            data = data.drop(columns=[c for c in self.keep_columns if c not in (self.predictor.feature_columns or [])])
        out = self.predictor.predict(data, **self.predict_kwargs).reset_index(drop=True)
        if self.keep_columns:
            kept = batch[self.keep_columns].reset_index(drop=True)
            out = pd.concat([kept, out], axis=1)
        return out


class _PandasUDFPredictor(Predictor):
    """The Predictor of ``BatchPredictor.from_pandas_udf``: a function of a DataFrame, no checkpoint."""

    takes_frame = True

    def __init__(self, udf: Callable[..., pd.DataFrame]) -> None:
        super().__init__()
        self.udf = udf

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint | None, udf: Callable[..., pd.DataFrame] | None = None, **kwargs: Any
    ) -> _PandasUDFPredictor:
        return cls(udf)  # type: ignore[arg-type]

    def _predict_pandas(self, data: pd.DataFrame, **kwargs: Any) -> pd.DataFrame:
        return self.udf(data, **kwargs)


class BatchPredictor:
    """Scores datasets with a Predictor built from a checkpoint on every scoring worker.

    Args:
        checkpoint: The checkpoint to load (its URI must be readable by the Ray workers); None for
            ``from_pandas_udf``.
        predictor_cls: The Predictor class, e.g. ``XGBoostPredictor``.
        **predictor_kwargs: Passed to ``predictor_cls.from_checkpoint``.
    """

    def __init__(self, checkpoint: Checkpoint | None, predictor_cls: type[Predictor], **predictor_kwargs: Any) -> None:
        if not (isinstance(predictor_cls, type) and issubclass(predictor_cls, Predictor)):
            raise InvalidArgumentError("predictor_cls must be a trainwire Predictor class", field="predictor_cls")
        self.checkpoint = checkpoint
        self.predictor_cls = predictor_cls
        self.predictor_kwargs = predictor_kwargs

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, predictor_cls: type[Predictor], **predictor_kwargs: Any
    ) -> BatchPredictor:
        return cls(checkpoint, predictor_cls, **predictor_kwargs)

    @classmethod
    def from_pandas_udf(cls, pandas_udf: Callable[..., pd.DataFrame]) -> BatchPredictor:
        """Scores with a function of a DataFrame batch instead of a checkpoint's model, as in Ray 2.4.

        Args:
            pandas_udf: Takes a batch (and ``predict``'s extra keyword arguments) and returns a
                DataFrame of predictions, one row per input row.
        """
        if not callable(pandas_udf):
            raise InvalidArgumentError("pandas_udf must be callable", field="pandas_udf")
        return cls(None, _PandasUDFPredictor, udf=pandas_udf)

    def predict(
        self,
        data: Any,
        *,
        feature_columns: list[str] | None = None,
        keep_columns: list[str] | None = None,
        batch_size: int = 4096,
        min_scoring_workers: int = 1,
        max_scoring_workers: int | None = None,
        num_cpus_per_worker: float | None = None,
        num_gpus_per_worker: float | None = None,
        ray_remote_args: dict[str, Any] | None = None,
        **predict_kwargs: Any,
    ) -> Any:
        """Scores a Ray Dataset (or a pandas DataFrame) and returns a Ray Dataset of predictions.

        Args:
            data: A ``ray.data.Dataset`` or a pandas DataFrame.
            feature_columns: Columns to score on (default: all but ``keep_columns``).
            keep_columns: Columns copied to the output next to the predictions (e.g. ids).
            batch_size: Rows per batch handed to a scoring worker.
            min_scoring_workers: Smallest size of the actor pool.
            max_scoring_workers: Largest size of the actor pool (default: ``min_scoring_workers``).
            num_cpus_per_worker: CPUs reserved by each scoring worker (default 1).
            num_gpus_per_worker: GPUs reserved by each scoring worker.
            ray_remote_args: Extra Ray remote arguments of the scoring actors.
            **predict_kwargs: Passed to ``Predictor.predict``.
        """
        import ray.data

        max_workers = max_scoring_workers or min_scoring_workers
        if min_scoring_workers < 1 or max_workers < min_scoring_workers:
            raise InvalidArgumentError(
                f"need 1 <= min_scoring_workers <= max_scoring_workers, got {min_scoring_workers} and {max_workers}",
                field="min_scoring_workers",
            )
        if batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
        ds = ray.data.from_pandas(data) if isinstance(data, pd.DataFrame) else data
        remote_args = dict(ray_remote_args or {})
        remote_args["num_cpus"] = 1 if num_cpus_per_worker is None else num_cpus_per_worker
        if num_gpus_per_worker:
            remote_args["num_gpus"] = num_gpus_per_worker
        return ds.map_batches(
            _ScoringActor,
            fn_constructor_kwargs={
                "checkpoint": self.checkpoint,
                "predictor_cls": self.predictor_cls,
                "predictor_kwargs": self.predictor_kwargs,
                "feature_columns": feature_columns,
                "keep_columns": keep_columns,
                "predict_kwargs": predict_kwargs,
            },
            compute=ray.data.ActorPoolStrategy(min_size=min_scoring_workers, max_size=max_workers),
            batch_size=batch_size,
            batch_format="pandas",
            **remote_args,
        )

    def predict_pipelined(
        self,
        data: Any,
        *,
        blocks_per_window: int | None = None,
        bytes_per_window: int | None = None,
        **predict_kwargs: Any,
    ) -> Any:
        """Ray 2.4's windowed scoring, for datasets larger than memory: ``predict`` on today's Ray Data.

        Ray Data now streams every dataset through the scoring workers block by block, which is
        what windows were for (Ray removed ``DatasetPipeline``), so this returns ``predict``'s lazy
        Dataset; iterate it (``iter_batches``) or write it out as the pipeline was.

        Args:
            data: A ``ray.data.Dataset`` or a pandas DataFrame.
            blocks_per_window: Accepted for Ray 2.4's scripts (>= 1); streaming needs no windows.
            bytes_per_window: Accepted for Ray 2.4's scripts (>= 1); streaming needs no windows.
            **predict_kwargs: As for ``predict``.
        """
        if blocks_per_window is None and bytes_per_window is None:
            # Ray 2.4 required one of them.
            raise InvalidArgumentError(
                "predict_pipelined needs blocks_per_window or bytes_per_window", field="blocks_per_window"
            )
        for name, value in (("blocks_per_window", blocks_per_window), ("bytes_per_window", bytes_per_window)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InvalidArgumentError(f"{name} must be an integer >= 1, got {value!r}", field=name)
        warnings.warn(
            "predict_pipelined streams the dataset as predict does (Ray Data has no windows any more); "
            "call predict instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.predict(data, **predict_kwargs)

    def __repr__(self) -> str:
        return f"BatchPredictor(checkpoint={self.checkpoint!r}, predictor_cls={self.predictor_cls.__name__})"
