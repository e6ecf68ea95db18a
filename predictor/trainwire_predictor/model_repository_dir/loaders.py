"""One loader per framework of a model repository's files, each the framework's own (blocking calls).

XGBoost and LightGBM files are data; so are ONNX graphs (onnxruntime) and TorchScript
archives (``torch.jit.load``: TorchScript's own interpreter, whose archive unpickler rebuilds
tensors and TorchScript classes only). A scikit-learn pickle or joblib file is code: it is loaded
only where the operator trusts the repository (``model_repository_trust_pickles``).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainwire.predictor import Predictor
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
from trainwire_core.inference.codec import DTYPES, NUMERIC
from trainwire_predictor.model_repository_dir.config import (
    LIGHTGBM,
    ONNX,
    SKLEARN,
    TORCHSCRIPT,
    XGBOOST,
    ModelSettings,
    Scheduling,
)
from trainwire_predictor.models import TensorSpec

# onnxruntime's element types -> the protocol's datatypes.
_ONNX_DATATYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}


def load_model(framework: str, data: bytes, settings: ModelSettings, trust_pickles: bool, label: str) -> Predictor:
    """Loads one model file's bytes with its framework's own loader.

    Args:
        framework: One of the repository's frameworks.
        data: The model file's bytes.
        settings: The model folder's configuration (declared inputs and outputs).
        trust_pickles: Whether pickles (scikit-learn) may be loaded.
        label: The file, for messages.

    Raises:
        FailedPreconditionError: A pickle the operator does not trust, or a configuration that
            does not fit the model.
    """
    if framework == XGBOOST:
        import xgboost

        from trainwire.xgboost.predictor import XGBoostPredictor

        booster = xgboost.Booster()
        booster.load_model(bytearray(data))  # JSON or UBJSON, told apart by the bytes
        return _tabular(XGBoostPredictor(booster, feature_columns=_columns(settings), nthread=1), settings)
    if framework == LIGHTGBM:
        import lightgbm

        from trainwire.lightgbm.predictor import LightGBMPredictor

        booster = lightgbm.Booster(model_str=data.decode("utf-8"))
        return _tabular(LightGBMPredictor(booster, feature_columns=_columns(settings), num_threads=1), settings)
    if framework == SKLEARN:
        if not trust_pickles:
            raise FailedPreconditionError(
                f"{label} is a scikit-learn pickle; loading it would run code from the model repository. The "
                "operator allows it with TRAINWIRE_PREDICTOR_MODEL_REPOSITORY_TRUST_PICKLES=true where the "
                "repository's writers are trusted",
                field="model_name",
            )
        import joblib

        from trainwire.sklearn.predictor import SklearnPredictor

        estimator = joblib.load(io.BytesIO(data))  # joblib reads plain pickles too
        if not callable(getattr(estimator, "predict", None)):
            raise FailedPreconditionError(f"{label} holds a {type(estimator).__name__}, without predict()")
        return _tabular(SklearnPredictor(estimator, feature_columns=_columns(settings)), settings)
    if framework == ONNX:
        return OnnxPredictor(data, settings)
    if framework == TORCHSCRIPT:
        return TorchScriptPredictor(data, settings)
    raise FailedPreconditionError(f"{label}: the predictor cannot serve framework {framework!r}")


def apply_scheduling(predictor: Predictor, settings: ModelSettings, name: str) -> Predictor:
    """Has a loaded model called as its ``config.pbtxt`` says, as Triton calls it.

    The predictor keeps the configuration as ``scheduling``: the batcher's policy lookup and the
    model configuration extension read it there. Its requests are joined only under the
    configuration's ``dynamic_batching`` (so it no longer counts as batch invariant: the predictor
    would otherwise join a tree model's requests whatever the configuration says), a request of
    more than ``max_batch_size`` rows is refused, and at most the instance groups' count of calls
    run at once.

    Args:
        predictor: The loaded model.
        settings: Its folder's configuration (nothing changes without a ``config.pbtxt``).
        name: The model's name, for messages.
    """
    scheduling = settings.scheduling
    if scheduling is None:
        return predictor
    predictor.scheduling = scheduling  # type: ignore[attr-defined]
    predictor.batch_invariant = False  # type: ignore[misc] - this model's configuration decides what joins
    predictor.predict_columns = _scheduled(predictor.predict_columns, scheduling, name)  # type: ignore[method-assign]
    return predictor


def _scheduled(predict: Any, scheduling: Scheduling, name: str) -> Any:
    """``predict`` with the configuration's row limit and its instances' gate (a call waits for a free instance)."""
    limit = scheduling.max_batch_size
    gate = threading.BoundedSemaphore(scheduling.instances) if scheduling.instances else None

    def predict_columns(data: Any, feature_columns: Any = None, **kwargs: Any) -> dict[str, np.ndarray]:
        if limit:
            rows = len(next(iter(data.values()))) if isinstance(data, dict) else len(data)
            if rows > limit:
                # Triton's words: the batcher never joins past the limit, so only one request alone gets here.
                raise InvalidArgumentError(
                    f"inference request batch-size must be <= {limit} for {name!r} (its config.pbtxt's "
                    f"max_batch_size); this one has {rows} rows",
                    field="inputs",
                )
        if gate is None:
            return predict(data, feature_columns, **kwargs)
        with gate:
            return predict(data, feature_columns, **kwargs)

    return predict_columns


def _columns(settings: ModelSettings) -> list[str] | None:
    """Declared inputs that are one value per row each (``[-1]`` or ``[-1, 1]``): the model's feature columns."""
    inputs = settings.inputs
    if inputs and all(spec.shape in ((-1,), (-1, 1)) for spec in inputs) and len(inputs) > 1:
        return [spec.name for spec in inputs]
    return None


class _NamedOutputs:
    """Mixed into a tabular predictor's class: its outputs under the names a configuration declares.

    One declared output takes every prediction column (``[N]``, or ``[N, K]`` for K columns, as
    Triton's FIL backend answers); several take the columns one each, in order.
    """

    output_names: list[str]

    def predict_columns(self, data: Any, feature_columns: Any = None, **kwargs: Any) -> dict[str, np.ndarray]:
        out = super().predict_columns(data, feature_columns, **kwargs)  # type: ignore[misc]
        names = self.output_names
        if len(names) == 1:
            arrays = list(out.values())
            return {names[0]: arrays[0] if len(arrays) == 1 else np.column_stack(arrays)}
        if len(names) != len(out):
            raise ValueError(f"the model gives {len(out)} output columns; its configuration declares {len(names)}")
        return dict(zip(names, out.values()))


_NAMED_CLASSES: dict[type, type] = {}


def _name_outputs(predictor: Predictor, settings: ModelSettings) -> None:
    """Gives a tabular predictor the configuration's output names (a subclass of its own class, made once)."""
    base = type(predictor)
    named = _NAMED_CLASSES.get(base)
    if named is None:
        named = _NAMED_CLASSES[base] = type(base.__name__, (_NamedOutputs, base), {})
    predictor.__class__ = named
    predictor.output_names = [spec.name for spec in settings.outputs]  # type: ignore[attr-defined]


def _tabular(predictor: Predictor, settings: ModelSettings) -> Predictor:
    """A tabular model with its declared inputs (columns, ``_columns``, or one ``[-1, F]`` matrix) and outputs."""
    if settings.outputs:
        _name_outputs(predictor, settings)
    inputs = settings.inputs
    if not inputs:
        return predictor
    names = _columns(settings)
    if names:
        _match_columns(predictor, names, settings.source)
        predictor.signature_specs = (list(inputs), list(settings.outputs))  # type: ignore[attr-defined]
        return predictor
    if len(inputs) != 1:
        raise FailedPreconditionError(
            f"{settings.source}: a tabular model takes one value per row per input, or one [-1, F] input"
        )
    spec = inputs[0]
    width = spec.shape[1] if len(spec.shape) == 2 else -1
    dtype = np.float32 if spec.datatype == "FP32" else np.float64
    # The outputs' names and datatypes: what one zero row gives.
    probe = predictor.predict_columns(np.zeros((1, max(width, _width(predictor))), dtype=dtype))
    outputs = [TensorSpec(name, _datatype(arr.dtype), (-1, *arr.shape[1:])) for name, arr in probe.items()]
    predictor.declared_specs = ([TensorSpec(spec.name, spec.datatype, (-1, width))], outputs)  # type: ignore[attr-defined]
    # One matrix in the model's column order: no columns to match by name.
    predictor.feature_columns = None
    return predictor


def _match_columns(predictor: Predictor, names: list[str], source: str) -> None:
    """The declared columns are the model's: its own feature names, or names given for its positions.

    A model trained on a bare matrix carries its library's placeholder names (LightGBM's
    ``Column_0``..., XGBoost's none): the declared names then stand for its columns in order.

    Raises:
        FailedPreconditionError: The model names its features, and otherwise.
    """
    own = list(predictor.model_columns or [])
    placeholders = [f"Column_{i}" for i in range(len(names))]
    if not own or own == names:
        return
    if own == placeholders and hasattr(predictor, "_model_columns"):
        predictor._model_columns = names  # type: ignore[attr-defined]
        return
    raise FailedPreconditionError(
        f"{source}: inputs {', '.join(names)} are not the model's features ({', '.join(map(str, own))})"
    )


def _width(predictor: Any) -> int:
    """The number of features a tree model or estimator reads (1 where it cannot tell)."""
    model = getattr(predictor, "model", None) or getattr(predictor, "estimator", None)
    for attr in ("num_features", "num_feature"):
        if callable(getattr(model, attr, None)):
            return int(getattr(model, attr)())
    return int(getattr(model, "n_features_in_", 1))


def _datatype(dtype: np.dtype) -> str:
    from trainwire_core.inference.codec import datatype_of

    return datatype_of(dtype)


class TensorPredictor(Predictor):
    """A model of named tensors (ONNX, TorchScript): the request's tensors in, the model's named outputs out.

    ``takes_tensors`` tells the predictor's codec to hand the decoded tensors over by name, of any
    rank, instead of building a table of columns. ``declared_specs`` is what ModelMetadata shows.
    """

    takes_tensors = True

    def __init__(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        super().__init__()
        self.declared_specs = (list(inputs), list(outputs))
        self.input_datatype = inputs[0].datatype if inputs else "FP32"

    @property
    def inputs(self) -> list[TensorSpec]:
        return self.declared_specs[0]

    def _feeds(self, data: Any) -> list[np.ndarray]:
        """The inputs in the model's order, checked against their specs and cast to their dtypes."""
        if not isinstance(data, dict):
            data = {self.inputs[0].name: np.asarray(data)}
        feeds = []
        for spec in self.inputs:
            if spec.name not in data:
                raise InvalidArgumentError(f"missing input {spec.name!r}", field="inputs")
            arr = np.asarray(data[spec.name])
            if len(spec.shape) != arr.ndim or any(d >= 0 and d != got for d, got in zip(spec.shape, arr.shape)):
                raise InvalidArgumentError(
                    f"input {spec.name!r} has shape {list(arr.shape)}; the model takes {list(spec.shape)} "
                    "(-1: any size)",
                    field="inputs",
                )
            if spec.datatype in NUMERIC and arr.dtype != DTYPES[spec.datatype]:
                arr = arr.astype(DTYPES[spec.datatype])
            feeds.append(np.ascontiguousarray(arr))
        return feeds

    def predict_columns(self, data: Any, feature_columns: Any = None, **kwargs: Any) -> dict[str, np.ndarray]:
        """Scores named tensors (or one array for a one-input model); output name -> array."""
        outputs = self._run(self._feeds(data))
        names = [spec.name for spec in self.declared_specs[1]]
        return {names[i] if i < len(names) else f"output__{i}": np.asarray(out) for i, out in enumerate(outputs)}

    def _run(self, feeds: list[np.ndarray]) -> list[Any]:
        raise NotImplementedError

    def _predict_numpy(self, data: np.ndarray, **kwargs: Any) -> Any:
        return next(iter(self.predict_columns(data).values()))


def _dims(shape: Sequence[Any]) -> tuple[int, ...]:
    """An onnxruntime shape (ints, symbolic names, None) with -1 for every dimension not fixed."""
    return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)


class OnnxPredictor(TensorPredictor):
    """An ONNX graph on onnxruntime's CPU provider; its inputs and outputs are the graph's own."""

    framework = ONNX

    def __init__(self, data: bytes, settings: ModelSettings) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # One thread per call: the predictor runs several calls at once on its own threads.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        inputs = [TensorSpec(i.name, _onnx_datatype(i.type), _dims(i.shape)) for i in self.session.get_inputs()]
        outputs = [TensorSpec(o.name, _onnx_datatype(o.type), _dims(o.shape)) for o in self.session.get_outputs()]
        _check_declared(settings, inputs, outputs)
        super().__init__(inputs, outputs)
        self._input_names = [spec.name for spec in inputs]

    def _run(self, feeds: list[np.ndarray]) -> list[Any]:
        from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

        try:
            return self.session.run(None, dict(zip(self._input_names, feeds)))
        except (InvalidArgument, Fail) as exc:
            raise ValueError(str(exc)) from None  # the caller's input: INVALID_ARGUMENT


def _onnx_datatype(element_type: str) -> str:
    return _ONNX_DATATYPES.get(element_type, "BYTES")


def _check_declared(settings: ModelSettings, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
    """A configuration's declared tensors must be the graph's (by name): else the metadata would lie."""
    for kind, declared, actual in (("input", settings.inputs, inputs), ("output", settings.outputs, outputs)):
        unknown = sorted({spec.name for spec in declared} - {spec.name for spec in actual})
        if unknown:
            raise FailedPreconditionError(
                f"{settings.source}: {kind}(s) {', '.join(unknown)} are not the model's; it has "
                + ", ".join(spec.name for spec in actual)
            )


class TorchScriptPredictor(TensorPredictor):
    """A TorchScript module (``torch.jit.load``) called with the inputs in order.

    A TorchScript archive names no tensors: the configuration's ``input``/``output`` do (Triton's
    ``INPUT__0``/``OUTPUT__0``); without one, the module takes one FP32 matrix ``input`` and its
    outputs are ``output__0``, ``output__1``...
    """

    framework = TORCHSCRIPT

    def __init__(self, data: bytes, settings: ModelSettings) -> None:
        import torch

        self.module = torch.jit.load(io.BytesIO(data), map_location="cpu")
        self.module.eval()
        inputs = list(settings.inputs) or [TensorSpec("input", "FP32", (-1, -1))]
        outputs = list(settings.outputs) or [TensorSpec("output__0", "FP32", (-1, -1))]
        super().__init__(inputs, outputs)

    def _run(self, feeds: list[np.ndarray]) -> list[Any]:
        import torch

        # Raw request bytes decode read-only; torch wants tensors it may write (a module may work in place).
        tensors = [torch.from_numpy(arr if arr.flags.writeable else arr.copy()) for arr in feeds]
        with torch.inference_mode():
            out = self.module(*tensors)
        if isinstance(out, dict):
            out = list(out.values())
        elif not isinstance(out, list | tuple):
            out = [out]
        return [t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in out]
