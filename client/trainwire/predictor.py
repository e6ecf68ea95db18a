"""``Predictor``: scores batches with a checkpoint's model, as ``ray.train.predictor.Predictor``.

The same classes compute in process, in ``BatchPredictor`` on Ray Data, and
inside the predictor service, so every path gives the same answers.

A fitted Ray Data preprocessor of the common kinds (scalers, imputer, encoders,
concatenator, chains of them) runs as numpy on the input's columns
(``preprocessor_transforms``), with the results ``transform_batch`` gives;
any other preprocessor, or a batch those steps cannot reproduce exactly, goes
through ``transform_batch``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from trainwire.checkpoint import Checkpoint
from trainwire.preprocessor_transforms import Columns, Vectorised, vectorise
from trainwire_core.errors import InvalidArgumentError

DataBatch = pd.DataFrame | np.ndarray | dict[str, np.ndarray]
PREDICTIONS = "predictions"


class Predictor:
    """Scores batches: applies the checkpoint's preprocessor, then the model.

    ``predict`` takes a pandas DataFrame, a 2-D numpy array (columns in
    ``feature_columns`` order) or a dict of 1-D arrays, and answers in the input's
    type: a DataFrame with a "predictions" column (``predictions_<i>`` for a model
    with several outputs per row), one row per input row, or numpy as Ray's do. A column whose cells are 1-D arrays
    (a Ray tensor column) gives the model one input column per element.

    Args:
        preprocessor: A fitted Ray Data preprocessor, or None.
        feature_columns: The input columns the model was trained on, in order
            (None: take the input's columns as they come).
    """

    framework = ""
    # Protocol datatype the service advertises for each input column.
    input_datatype = "FP64"
    # Whether the model takes a DataFrame (else a 2-D numpy array).
    takes_frame = False
    # The batch format Ray 2.4's predictor of this framework computed in, which decides what
    # ``predict`` returns for numpy input: "numpy" (deep learning) or "pandas" (the rest).
    native_batch_format = "pandas"
    # Whether a row's prediction never depends on the other rows of its batch (bit for bit), so
    # the predictor service may score concurrent requests together.
    batch_invariant = False

    def __init__(self, preprocessor: Any = None, feature_columns: list[str] | None = None) -> None:
        self.preprocessor = preprocessor
        self.feature_columns = list(feature_columns) if feature_columns else None

    @property
    def preprocessor(self) -> Any:
        return self._preprocessor

    @preprocessor.setter
    def preprocessor(self, preprocessor: Any) -> None:
        self._preprocessor = preprocessor
        # Built once per preprocessor: None where it runs through transform_batch.
        self._vectorised: Vectorised | None = vectorise(preprocessor)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, **kwargs: Any) -> Predictor:
        """Builds the predictor from a checkpoint (its model, preprocessor and metadata)."""
        raise NotImplementedError

    @staticmethod
    def checkpoint_defaults(checkpoint: Checkpoint, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the checkpoint's feature columns and preprocessor where the caller gave none."""
        kwargs.setdefault("feature_columns", checkpoint.get_metadata().get("feature_columns"))
        kwargs.setdefault("preprocessor", checkpoint.get_preprocessor())
        return kwargs

    def get_preprocessor(self) -> Any:
        return self.preprocessor

    def set_preprocessor(self, preprocessor: Any) -> None:
        self.preprocessor = preprocessor

    @property
    def model_columns(self) -> list[str] | None:
        """Columns the model itself reads, after preprocessing (default: ``feature_columns``)."""
        return self.feature_columns

    def predict(self, data: DataBatch, **predict_kwargs: Any) -> DataBatch:
        """Scores one batch; answers in the input's type, as Ray's predictors do.

        Args:
            data: A DataFrame, a 2-D numpy array or a dict of 1-D arrays.
            **predict_kwargs: Passed to the framework's predict (e.g. XGBoost's ``pred_contribs=True``),
                but for ``feature_columns`` (as in Ray 2.4: the columns the model reads, after
                preprocessing; integer positions for an array) and the framework's own (``dtype``).

        Returns:
            For a DataFrame, a DataFrame with the predictions. For a numpy array or a dict of
            arrays, numpy: a deep-learning predictor (``native_batch_format = "numpy"``) gives
            ``{"predictions": array}`` (one row per input row, several outputs as columns); the
            others give the one prediction column's array, or a dict of arrays for several columns.
        """
        columns = self.predict_columns(data, **predict_kwargs)
        if isinstance(data, np.ndarray | dict):
            return numpy_batch(columns, self.native_batch_format)
        return pd.DataFrame(columns)

    def predict_columns(
        self, data: DataBatch, feature_columns: list[Any] | None = None, **predict_kwargs: Any
    ) -> dict[str, np.ndarray]:
        """What ``predict`` computes, as output column name -> 1-D array (no DataFrame built)."""
        if feature_columns is not None:
            return self._predict_selected(data, list(feature_columns), **predict_kwargs)
        if self.preprocessor is None and not self.takes_frame:
            out = self._score(self._to_matrix(data, self.model_columns), **predict_kwargs)
        elif (columns := self._preprocess_vectorised(data)) is not None:
            if self.takes_frame:
                frame = self._select(pd.DataFrame(columns, copy=False), self.model_columns)
                out = self._predict_pandas(frame, **predict_kwargs)
            else:
                out = self._score(self._columns_matrix(columns, self.model_columns), **predict_kwargs)
        else:
            frame = self._to_frame(data)
            if self.preprocessor is not None:
                frame = self.preprocessor.transform_batch(frame)
            if self.takes_frame:
                out = self._predict_pandas(self._select(frame, self.model_columns), **predict_kwargs)
            else:
                out = self._score(self._to_matrix(frame, self.model_columns), **predict_kwargs)
        return prediction_columns(out)

    def _predict_selected(self, data: DataBatch, columns: list[Any], **predict_kwargs: Any) -> dict[str, np.ndarray]:
        """Scores ``columns`` of the preprocessed input, as Ray 2.4's ``predict(data, feature_columns=...)``."""
        frame = self._to_frame(data)
        if self.preprocessor is not None:
            frame = self.preprocessor.transform_batch(frame)
        frame = self._select(frame, columns)
        if self.takes_frame:
            return prediction_columns(self._predict_pandas(frame, **predict_kwargs))
        return prediction_columns(self._score(self._to_matrix(frame, None), **predict_kwargs))

    def _preprocess_vectorised(self, data: DataBatch) -> Columns | None:
        """The preprocessed columns, computed with numpy; None where ``transform_batch`` must do it."""
        vectorised = self._vectorised
        if vectorised is None:
            return None
        columns = self._as_columns(data)
        if columns is None:
            return None
        out = vectorised(columns)
        if out is None or (self.takes_frame and any(v.ndim != 1 for v in out.values())):
            return None
        return out

    def _as_columns(self, data: DataBatch) -> Columns | None:
        """The input as name -> 1-D array, named as ``_to_frame`` names the frame's columns."""
        if isinstance(data, pd.DataFrame):
            if not data.columns.is_unique:
                return None
            dtypes = set(data.dtypes)
            if len(dtypes) == 1 and isinstance(dtype := dtypes.pop(), np.dtype) and dtype.kind in "iuf":
                # One numpy block: one conversion, then a view per column (a column at a time costs more).
                arr = data.to_numpy()
                return {c: arr[:, i] for i, c in enumerate(data.columns)}
            return {c: data[c].to_numpy() for c in data.columns}
        if isinstance(data, dict):
            return {k: v if type(v) is np.ndarray and v.ndim == 1 else _column(v, k) for k, v in data.items()}
        arr = np.asarray(data)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2:
            return None
        cols = self.feature_columns
        names = cols if cols and arr.shape[1] == len(cols) else range(arr.shape[1])
        return {name: arr[:, i] for i, name in enumerate(names)}

    @staticmethod
    def _columns_matrix(columns: Columns, names: list[str] | None) -> np.ndarray:
        """The model's 2-D input from columns (a 2-D column, e.g. a Concatenator's, gives several)."""
        names = names or list(columns)
        missing = [c for c in names if c not in columns]
        if missing:
            raise InvalidArgumentError(f"missing input column(s): {', '.join(map(str, missing))}", field="inputs")
        arrays = [_stack_cells(columns[c]) for c in names]
        if len(arrays) == 1 and arrays[0].ndim == 2:
            return arrays[0]
        return np.column_stack(arrays)

    # --- a compiled twin ------------------------------------------------------
    # A service may hand a predictor a compiled twin of its model (the predictor service compiles
    # tree models): anything with ``predict(2-D array)`` giving the same outputs, used for every
    # call without framework-specific arguments.
    compiled: Any = None

    def prepare_for_batches(self) -> None:
        """Readies the model for calls of many rows at once; the predictor service calls it on a model it batches.

        The default does nothing; a framework whose kernels favour another layout of the
        weights for multi-row calls lays them out here, once, at load.
        """

    def use_compiled(self, compiled: Any) -> None:
        """Scores with ``compiled`` from now on (None: the framework's own predict again)."""
        self.compiled = compiled

    def framework_predict(self, data: np.ndarray, **kwargs: Any) -> Any:
        """The framework's own scoring of a 2-D array, compiled twin or not."""
        return self._predict_numpy(data, **kwargs)

    def _score(self, data: np.ndarray, **kwargs: Any) -> Any:
        compiled = self.compiled
        if compiled is not None and not kwargs:
            return compiled.predict(data)
        return self._predict_numpy(data, **kwargs)

    # --- what a framework implements -------------------------------------------
    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> Any:
        """Scores a 2-D array; returns a 1-D or 2-D array of predictions."""
        raise NotImplementedError

    def _predict_pandas(self, data: pd.DataFrame, **kwargs: Any) -> Any:
        """Scores a DataFrame (for models that take one)."""
        return self._predict_numpy(data.to_numpy(), **kwargs)

    # --- conversions ----------------------------------------------------------
    def _to_frame(self, data: DataBatch) -> pd.DataFrame:
        if isinstance(data, pd.DataFrame):
            return data
        if isinstance(data, dict):
            return pd.DataFrame({k: _column(v, k) for k, v in data.items()})
        arr = np.asarray(data)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        cols = self.feature_columns
        if cols and arr.ndim == 2 and arr.shape[1] == len(cols):
            return pd.DataFrame(arr, columns=cols)
        return pd.DataFrame(arr)

    @staticmethod
    def _select(frame: pd.DataFrame, columns: list[str] | None) -> pd.DataFrame:
        if not columns:
            return frame
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise InvalidArgumentError(f"missing input column(s): {', '.join(map(str, missing))}", field="inputs")
        return frame if list(frame.columns) == columns else frame[columns]

    @classmethod
    def _to_matrix(cls, data: DataBatch, columns: list[str] | None) -> np.ndarray:
        if isinstance(data, pd.DataFrame):
            frame = cls._select(data, columns)
            if any(getattr(dtype, "kind", "") == "O" for dtype in frame.dtypes):
                # Ray tensor columns: cells that are arrays, each stacked into columns of its own.
                return np.column_stack([_stack_cells(frame.iloc[:, i].to_numpy()) for i in range(frame.shape[1])])
            return frame.to_numpy()
        if isinstance(data, dict):
            names = columns or list(data)
            missing = [c for c in names if c not in data]
            if missing:
                raise InvalidArgumentError(f"missing input column(s): {', '.join(map(str, missing))}", field="inputs")
            return np.column_stack([_column(data[c], c, allow_2d=True) for c in names])
        arr = np.asarray(data)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2:
            raise InvalidArgumentError(f"expected a 2-D array of rows, got shape {list(arr.shape)}", field="inputs")
        if columns and arr.shape[1] != len(columns):
            raise InvalidArgumentError(
                f"expected {len(columns)} columns ({', '.join(columns)}), got {arr.shape[1]}", field="inputs"
            )
        return arr

    def __repr__(self) -> str:
        return f"{type(self).__name__}(preprocessor={self.preprocessor!r})"


def _stack_cells(arr: np.ndarray) -> np.ndarray:
    """A column whose cells are 1-D arrays (or lists) as an (N, d) array; other columns as they are."""
    if arr.dtype != object or not len(arr) or not isinstance(arr[0], np.ndarray | list | tuple):
        return arr
    try:
        return np.stack([np.asarray(cell) for cell in arr]).reshape(len(arr), -1)
    except ValueError as exc:  # cells of different lengths
        raise InvalidArgumentError(f"a tensor column's cells must all have one shape: {exc}", field="inputs") from exc


def _column(values: Any, name: str, allow_2d: bool = False) -> np.ndarray:
    """One input column as a 1-D array (``allow_2d``: or a 2-D tensor column, as Ray's numpy batches hold)."""
    arr = _stack_cells(np.asarray(values)) if allow_2d else np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if allow_2d and arr.ndim == 2:
        return arr
    if arr.ndim != 1:
        raise InvalidArgumentError(
            f"column {name!r} must be 1-D (one value per row), got shape {list(arr.shape)}", field="inputs"
        )
    return arr


def one_dtype(dtype: Any) -> Any:
    """The one dtype of Ray's ``predict(..., dtype=)``, which may be a dict of column -> dtype.

    Raises:
        InvalidArgumentError: The dict names several dtypes; trainwire's models take one tensor.
    """
    if not isinstance(dtype, dict):
        return dtype
    dtypes = set(dtype.values())
    if len(dtypes) > 1:
        raise InvalidArgumentError(
            f"dtype names several dtypes {sorted(map(str, dtypes))}; the model takes one tensor of one dtype",
            field="dtype",
        )
    return dtypes.pop() if dtypes else None


def prediction_columns(out: Any) -> dict[str, np.ndarray]:
    """Names model output as Ray's predictors do: "predictions", or "predictions_<i>" per output column."""
    if isinstance(out, pd.DataFrame):
        return {str(c): out[c].to_numpy() for c in out.columns}
    arr = np.asarray(out)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim == 1:
        return {PREDICTIONS: arr}
    if arr.ndim == 2:
        return {f"{PREDICTIONS}_{i}": arr[:, i] for i in range(arr.shape[1])}
    raise ValueError(f"model output of shape {list(arr.shape)} is not one row per input row")


def numpy_batch(columns: dict[str, np.ndarray], native_batch_format: str) -> np.ndarray | dict[str, np.ndarray]:
    """Prediction columns as Ray 2.4 answered a numpy batch in the predictor's native format."""
    if native_batch_format == "numpy":
        outputs = [f"{PREDICTIONS}_{i}" for i in range(len(columns))]
        if len(columns) > 1 and list(columns) == outputs:
            return {PREDICTIONS: np.stack([columns[name] for name in outputs], axis=1)}
        return dict(columns)
    if len(columns) == 1:
        return next(iter(columns.values()))
    return dict(columns)
