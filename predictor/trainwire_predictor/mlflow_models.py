"""MLflow models served as they are: registered versions, aliases, runs' models and local model directories.

A request names an MLflow model in one of two ways (as KServe's ``storageUri`` and
MLServer's ``parameters.uri`` point a served name at a model URI):

- ``mlflow:<registered name>``: a model of the tracking server's registry; the request's
  version is a version number (``3``) or an alias (``champion``); none means the latest version;
- a served name of the ``mlflow_models`` setting, mapped to ``models:/name/3``,
  ``models:/name@alias``, ``runs:/<run id>/<path>`` or a local MLflow model directory. An alias
  URI is followed as the alias moves; a version or run URI is one fixed version ("1" for a run).

Each is shown to the repository as a run of its own (``CheckpointIndex``, ``RegistryState``), so
versions, aliases and their refresh work as for trainwire's checkpoints.

Each flavor loads with its own library, and only from files that are data: XGBoost's model file,
LightGBM's text booster, scikit-learn's ``skops`` file (skops' own list of trusted types, never the
model's), a ``torch.export`` archive without pickles, a ``transformers`` pipeline's safetensors
weights with its tokenizer's files (transformers' own classes, never the model's code). A pickle
(scikit-learn's ``pickle`` and ``cloudpickle`` formats, LightGBM's scikit-learn models,
``torch.save``) is loaded only where the operator trusts the registry's pickles
(``mlflow_trust_pickles``); a ``python_function`` model (``mlflow.pyfunc``: the model's own code)
only where it trusts its code (``mlflow_trust_code``).

A ``transformers`` model answers as ``mlflow.pyfunc.load_model(...).predict`` does: the pipeline
built here runs under MLflow's own pyfunc wrapper (its input conversion, inference config, prompt
template and output shaping), so only the loading differs: weights, configuration and
tokenizer through transformers' ``from_pretrained`` on the model's files, with no remote code
and no hub download.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pathlib
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import yaml

from trainwire.predictor import Predictor
from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError
from trainwire_core.store_documents import CheckpointIndex, IndexedCheckpoint, RegistryState
from trainwire_predictor.models import TensorSpec

logger = logging.getLogger(__name__)

PREFIX = "mlflow:"
# The platform ModelMetadata reports for a python_function model (no trainwire framework).
PYFUNC_PLATFORM = "mlflow_pyfunc"
# ... and for an MLflow transformers pipeline.
TRANSFORMERS_PLATFORM = "mlflow_transformers"
# What MLflow's pyfunc answers per pipeline task (a column per output); other tasks: one text column.
_TASK_OUTPUTS = {
    "text-classification": [("label", "BYTES"), ("score", "FP64")],
    "sentiment-analysis": [("label", "BYTES"), ("score", "FP64")],
}
# A transformers flavor's components -> the Auto class a component of custom code would need.
_COMPONENT_AUTO_CLASSES = {
    "tokenizer": "AutoTokenizer",
    "feature_extractor": "AutoFeatureExtractor",
    "image_processor": "AutoImageProcessor",
    "processor": "AutoProcessor",
}
# XGBoost's scikit-learn classes a model file may name (constructed here, then given the file: data only).
_XGB_CLASSES = {
    "xgboost.core.Booster",
    "xgboost.sklearn.XGBClassifier",
    "xgboost.sklearn.XGBRegressor",
    "xgboost.sklearn.XGBRanker",
    "xgboost.sklearn.XGBRFClassifier",
    "xgboost.sklearn.XGBRFRegressor",
}
# MLflow's column types -> the protocol's datatypes.
_DATATYPES = {
    "double": "FP64",
    "float": "FP32",
    "long": "INT64",
    "integer": "INT32",
    "boolean": "BOOL",
    "string": "BYTES",
    "binary": "BYTES",
    "datetime": "BYTES",
}


@dataclasses.dataclass(frozen=True)
class Source:
    """Where one served MLflow model comes from.

    Attributes:
        registered: The registered model's name ("" for a run's model or a local directory).
        alias: The alias a served name follows ("" for none).
        version: The one version a served name is fixed to ("" where every version is served).
        uri: A run's model URI or a local directory (registered models: "").
    """

    registered: str = ""
    alias: str = ""
    version: str = ""
    uri: str = ""


def parse_uri(uri: str) -> Source:
    """A ``models:/``, ``runs:/`` URI or local path as a ``Source``.

    Raises:
        InvalidArgumentError: A ``models:/`` URI without a version or alias, or another scheme.
    """
    if uri.startswith("models:/"):
        rest = uri[len("models:/") :].strip("/")
        if "@" in rest:
            name, alias = rest.split("@", 1)
            return Source(registered=name, alias=alias)
        if "/" not in rest:
            return Source(uri=uri)  # MLflow 3's logged model (models:/m-<id>): one fixed version
        name, _, version = rest.rpartition("/")
        if not name or not version:
            raise InvalidArgumentError(f"{uri!r}: expected models:/<name>/<version> or models:/<name>@<alias>")
        return Source(registered=name, version=version)
    if uri.startswith("runs:/") or uri.startswith("file://") or ":/" not in uri:
        return Source(uri=uri)
    raise InvalidArgumentError(f"{uri!r}: an MLflow model URI is models:/, runs:/, file:// or a local path")


class MlflowModels:
    """Resolves and loads MLflow models for the model repository (blocking calls: run them in threads).

    Args:
        tracking_uri: The MLflow tracking server ("" : only local directories and runs' models resolve).
        served: Served model name -> model URI (``models:/...``, ``runs:/...``, a local directory).
        trust_pickles: Load the registry's pickled models (scikit-learn's pickle formats and the like).
        trust_code: Load ``python_function`` models (their own code); implies ``trust_pickles``.
        cache_dir: Where downloaded models are kept (default: a new temporary directory).
    """

    def __init__(
        self,
        tracking_uri: str = "",
        served: Mapping[str, str] | None = None,
        *,
        trust_pickles: bool = False,
        trust_code: bool = False,
        cache_dir: str = "",
    ) -> None:
        self.tracking_uri = tracking_uri
        self.served = {name: parse_uri(uri) for name, uri in (served or {}).items()}
        self.trust_code = trust_code
        self.trust_pickles = trust_pickles or trust_code
        self.cache_dir = pathlib.Path(cache_dir or tempfile.mkdtemp(prefix="trainwire-mlflow-"))
        self._lock = threading.Lock()
        self._client: Any = None

    def handles(self, name: str) -> bool:
        """Whether a model name is an MLflow model's."""
        return name in self.served or (bool(self.tracking_uri) and name.startswith(PREFIX) and len(name) > len(PREFIX))

    def source(self, name: str) -> Source:
        return self.served.get(name) or Source(registered=name[len(PREFIX) :])

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(self.tracking_uri or None, registry_uri=self.tracking_uri or None)
        return self._client

    # --- resolution --------------------------------------------------------------
    def read(self, name: str) -> tuple[CheckpointIndex | None, RegistryState]:
        """The model's versions as a checkpoint index (None: no such model) and its aliases (blocking)."""
        source = self.source(name)
        if not source.registered:
            return _index(name, ["1"], "1"), RegistryState(run_id=name)
        try:
            from mlflow.exceptions import MlflowException
        except ImportError as exc:  # pragma: no cover - mlflow is in the environment
            raise FailedPreconditionError("serving MLflow models needs the mlflow package") from exc
        try:
            versions = self.client.search_model_versions(f"name = '{_quoted(source.registered)}'")
            aliases = dict(self.client.get_registered_model(source.registered).aliases or {})
        except MlflowException as exc:
            if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
                return None, RegistryState(run_id=name)
            raise UnavailableError(f"MLflow registry at {self.tracking_uri}: {exc.message}") from exc
        except OSError as exc:
            raise UnavailableError(f"MLflow registry at {self.tracking_uri}: {exc}") from exc
        numbers = sorted(str(v.version) for v in versions if str(v.version).isdigit())
        numbers.sort(key=int)
        if source.version:
            numbers = [v for v in numbers if v == source.version]
        if not numbers:
            return None, RegistryState(run_id=name)
        default = aliases.get(source.alias, "") if source.alias else numbers[-1]
        return _index(name, numbers, default), RegistryState(run_id=name, aliases=aliases)

    # --- loading -----------------------------------------------------------------
    def download(self, name: str, version: str) -> pathlib.Path:
        """The model's local directory (downloaded once per version: registered versions are immutable)."""
        source = self.source(name)
        if source.uri and ":/" not in source.uri:
            return pathlib.Path(source.uri)
        if source.uri.startswith("file://"):
            return pathlib.Path(source.uri[len("file://") :])
        import mlflow.artifacts

        key = hashlib.sha256(f"{name}\0{version}".encode()).hexdigest()[:24]
        target = self.cache_dir / key
        with self._lock:
            if not (target / "MLmodel").exists():
                uri = source.uri or self.client.get_model_version_download_uri(source.registered, version)
                staging = pathlib.Path(tempfile.mkdtemp(dir=self.cache_dir))
                local = mlflow.artifacts.download_artifacts(
                    artifact_uri=uri, dst_path=str(staging), tracking_uri=self.tracking_uri or None
                )
                os.replace(_model_root(pathlib.Path(local)), target)
        return target

    def load(self, name: str, version: str) -> tuple[str, Predictor]:
        """Loads one version with its flavor's loader; (framework, Predictor) (blocking).

        Raises:
            FailedPreconditionError: The model is a pickle or code the operator does not trust,
                or a flavor the predictor cannot serve.
        """
        return load_directory(self.download(name, version), self.trust_pickles, self.trust_code)


def _quoted(name: str) -> str:
    return name.replace("'", "\\'")


def _index(name: str, versions: list[str], default: str) -> CheckpointIndex:
    checkpoints = tuple(IndexedCheckpoint(id=v, index=i, version=int(v)) for i, v in enumerate(versions))
    return CheckpointIndex(run_id=name, run_name=name, checkpoints=checkpoints, latest=versions[-1], best=default)


def _model_root(path: pathlib.Path) -> pathlib.Path:
    """The directory holding ``MLmodel`` in a download (the download itself, or its one subdirectory)."""
    if (path / "MLmodel").exists():
        return path
    found = sorted(path.rglob("MLmodel"))
    if not found:
        raise FailedPreconditionError(f"the MLflow model download at {path} has no MLmodel file")
    return found[0].parent


# --- flavors ---------------------------------------------------------------------


def load_directory(directory: pathlib.Path, trust_pickles: bool, trust_code: bool) -> tuple[str, Predictor]:
    """Loads a local MLflow model directory with its flavor's own loader (blocking)."""
    mlmodel_path = directory / "MLmodel"
    if not mlmodel_path.exists():
        raise NotFoundError(f"{directory} is not an MLflow model directory (no MLmodel file)", field="model_name")
    mlmodel = yaml.safe_load(mlmodel_path.read_text()) or {}
    flavors: dict[str, Any] = mlmodel.get("flavors") or {}
    framework, predictor = _load_flavor(directory, flavors, trust_pickles, trust_code, mlmodel)
    predictor.signature_specs = signature_specs(mlmodel.get("signature"))  # type: ignore[attr-defined]
    return framework, predictor


def _refuse(kind: str, directory: pathlib.Path, setting: str) -> FailedPreconditionError:
    return FailedPreconditionError(
        f"the MLflow model at {directory} is {kind}; loading it would run code from the registry. The "
        f"operator allows it with {setting}=true where the registry is trusted"
    )


def _load_flavor(
    directory: pathlib.Path,
    flavors: dict[str, Any],
    trust_pickles: bool,
    trust_code: bool,
    mlmodel: dict[str, Any] | None = None,
) -> tuple[str, Predictor]:
    if "xgboost" in flavors:
        return "xgboost", _xgboost(directory, flavors["xgboost"])
    if "lightgbm" in flavors:
        conf = flavors["lightgbm"]
        if conf.get("model_class", "lightgbm.basic.Booster") == "lightgbm.basic.Booster":
            import lightgbm

            from trainwire.lightgbm.predictor import LightGBMPredictor

            return "lightgbm", LightGBMPredictor(lightgbm.Booster(model_file=str(directory / conf["data"])))
        return "sklearn", _sklearn_predictor(_estimator(directory / conf["data"], conf, directory, trust_pickles))
    if "sklearn" in flavors:
        conf = flavors["sklearn"]
        return "sklearn", _sklearn_predictor(
            _estimator(directory / conf["pickled_model"], conf, directory, trust_pickles)
        )
    if "pytorch" in flavors:
        return "torch", _pytorch(directory, flavors["pytorch"], trust_pickles)
    if "transformers" in flavors:
        return TRANSFORMERS_PLATFORM, _transformers(directory, mlmodel or {}, trust_pickles, trust_code)
    if "python_function" in flavors:
        if not trust_code:
            raise _refuse("a python_function model (its own code)", directory, "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_CODE")
        import mlflow.pyfunc

        return PYFUNC_PLATFORM, PyfuncPredictor(mlflow.pyfunc.load_model(str(directory)))
    raise FailedPreconditionError(
        f"the MLflow model at {directory} has flavors {', '.join(flavors) or 'none'}; the predictor serves "
        "xgboost, lightgbm, sklearn, pytorch, transformers and (trusted) python_function models"
    )


def _xgboost(directory: pathlib.Path, conf: dict[str, Any]) -> Predictor:
    import xgboost

    model_class = conf.get("model_class", "xgboost.core.Booster")
    if model_class not in _XGB_CLASSES:
        raise FailedPreconditionError(f"the XGBoost model class {model_class!r} is not one of XGBoost's own")
    cls = getattr(xgboost, model_class.rsplit(".", 1)[1])
    model = cls()
    model.load_model(str(directory / conf["data"]))  # a JSON / UBJSON model file: data
    if isinstance(model, xgboost.Booster):
        from trainwire.xgboost.predictor import XGBoostPredictor

        return XGBoostPredictor(model)
    return _sklearn_predictor(model)


def _estimator(path: pathlib.Path, conf: dict[str, Any], directory: pathlib.Path, trust_pickles: bool) -> Any:
    """A scikit-learn-API model: skops with skops' own trusted types, a pickle only where trusted."""
    serialization = conf.get("serialization_format", "pickle")
    if serialization == "skops":
        import skops.io

        untrusted = skops.io.get_untrusted_types(file=str(path))
        if untrusted and not trust_pickles:
            raise _refuse(
                f"a skops file with types outside skops' trusted list ({', '.join(untrusted)})",
                directory,
                "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_PICKLES",
            )
        return skops.io.load(str(path), trusted=untrusted or None)
    if not trust_pickles:
        raise _refuse(f"a {serialization} pickle", directory, "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_PICKLES")
    import cloudpickle

    with open(path, "rb") as f:
        return cloudpickle.load(f)


def _sklearn_predictor(estimator: Any) -> Predictor:
    from trainwire.sklearn.predictor import SklearnPredictor

    if not callable(getattr(estimator, "predict", None)):
        raise FailedPreconditionError(f"the MLflow model is a {type(estimator).__name__}, without predict()")
    return SklearnPredictor(estimator)


def _pytorch(directory: pathlib.Path, conf: dict[str, Any], trust_pickles: bool) -> Predictor:
    import torch

    data = directory / conf.get("model_data", "data")
    if (data / "model.pt2").exists():
        from mlflow.pytorch import _validate_pt2_archive_is_pickle_free

        if not trust_pickles:
            _validate_pt2_archive_is_pickle_free(str(data / "model.pt2"))
        return TorchModulePredictor(torch.export.load(str(data / "model.pt2")).module())
    if not trust_pickles:
        raise _refuse("a torch.save pickle", directory, "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_PICKLES")
    return TorchModulePredictor(torch.load(str(data / "model.pth"), weights_only=False))


def _transformers(directory: pathlib.Path, mlmodel: dict[str, Any], trust_pickles: bool, trust_code: bool) -> Predictor:
    """A ``mlflow.transformers`` pipeline, loaded with transformers' own classes from the model's files."""
    import transformers

    conf = mlmodel["flavors"]["transformers"]
    if "model_binary" not in conf:
        # save_pretrained=False: only a hub repository and revision were recorded.
        raise FailedPreconditionError(
            f"the MLflow transformers model at {directory} holds no weights (saved with save_pretrained=False, "
            "a hub reference); the predictor serves the weights a model carries, without hub downloads"
        )
    if conf.get("model_local_base") or conf.get("peft_adapter"):
        raise FailedPreconditionError(
            f"the MLflow transformers model at {directory} is a PEFT adapter; serve it merged, or as a trainwire "
            "adapter run on its base (docs/serving/generative.md)"
        )
    custom = bool(conf.get("code")) or not _transformers_class(conf.get("pipeline_model_type", ""))
    if custom and not trust_code:
        raise _refuse(
            f"a transformers model of its own code ({conf.get('pipeline_model_type')})",
            directory,
            "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_CODE",
        )
    model_path = directory / conf["model_binary"]
    if not any(model_path.glob("*.safetensors")) and not trust_pickles:
        raise _refuse(
            "a transformers model whose weights are a torch pickle",
            directory,
            "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_PICKLES",
        )
    options: dict[str, Any] = {"local_files_only": True, "trust_remote_code": custom and trust_code}
    if not trust_pickles:
        options["use_safetensors"] = True
    dtype = conf.get("torch_dtype") or conf.get("dtype")
    if isinstance(dtype, str) and dtype.startswith("torch."):
        import torch

        options["dtype"] = getattr(torch, dtype.removeprefix("torch."))
    if custom:
        model = transformers.AutoModel.from_pretrained(str(model_path), **options)
    else:
        model = _transformers_class(conf["pipeline_model_type"]).from_pretrained(str(model_path), **options)
    components: dict[str, Any] = {}
    names = list(conf.get("components") or []) + (["processor"] if "processor_type" in conf else [])
    for name in names:
        class_name = conf.get(f"{name}_type", "")
        cls = _transformers_class(class_name)
        own_code = cls is None
        if own_code:
            if not trust_code:
                raise _refuse(
                    f"a {name} of its own code ({class_name})", directory, "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_CODE"
                )
            cls = getattr(transformers, _COMPONENT_AUTO_CLASSES[name])
        path = directory / "components" / name
        components[name] = cls.from_pretrained(str(path), local_files_only=True, trust_remote_code=own_code)
    pipeline = transformers.pipeline(task=conf["task"], model=model, device=-1, **components)
    predictor = TransformersPredictor(pipeline, _pyfunc_wrapper(directory, mlmodel, pipeline, conf))
    specs = signature_specs(mlmodel.get("signature"))
    inputs = specs[0] if specs else [TensorSpec("text", "BYTES", (-1,))]
    outputs = _TASK_OUTPUTS.get(conf["task"], [("predictions", "BYTES")])
    predictor.declared_specs = (inputs, [TensorSpec(name, datatype, (-1,)) for name, datatype in outputs])
    predictor.feature_columns = [spec.name for spec in inputs]  # one 1-D BYTES tensor per text column
    return predictor


def _transformers_class(name: str) -> Any:
    """transformers' own class of that name (None for a name it does not define: the model's code)."""
    import transformers

    cls = getattr(transformers, name, None) if name.isidentifier() else None
    return cls if isinstance(cls, type) else None


def _pyfunc_wrapper(directory: pathlib.Path, mlmodel: dict[str, Any], pipeline: Any, conf: dict[str, Any]) -> Any:
    """MLflow's own pyfunc model around the pipeline: what ``mlflow.pyfunc.load_model`` would return."""
    from mlflow.models import Model
    from mlflow.pyfunc import PyFuncModel
    from mlflow.transformers import _get_model_config, _TransformersWrapper

    pyfunc_conf = (mlmodel.get("flavors") or {}).get("python_function") or {}
    model_config = _get_model_config(directory / "components", pyfunc_conf.get("model_config"))
    prompt_template = (mlmodel.get("metadata") or {}).get("prompt_template")
    wrapper = _TransformersWrapper(pipeline, dict(conf), model_config, prompt_template)
    return PyFuncModel(model_meta=Model.load(str(directory)), model_impl=wrapper)


class TransformersPredictor(Predictor):
    """An MLflow transformers pipeline: texts in (BYTES), the pipeline's answers out, as MLflow's pyfunc gives them.

    Attributes:
        pipeline: The ``transformers.Pipeline`` (a causal language model's also serves generation).
        model: MLflow's pyfunc model around it.
    """

    framework = TRANSFORMERS_PLATFORM
    input_datatype = "BYTES"
    takes_frame = True
    # The OIP tensors (the model repository takes them as they are): set by the loader.
    declared_specs: tuple[list[TensorSpec], list[TensorSpec]] | None = None

    def __init__(self, pipeline: Any, model: Any) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.model = model

    def _predict_pandas(self, data: pd.DataFrame, **kwargs: Any) -> Any:
        texts = data.apply(lambda col: col.map(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v))
        if texts.shape[1] == 1 and not _named_inputs(self.model):
            # A signature without column names (a pipeline's usual one): the texts as MLflow's list input.
            out = self.model.predict(texts.iloc[:, 0].tolist())
        else:
            out = self.model.predict(texts)
        if isinstance(out, pd.DataFrame):
            return out
        return pd.DataFrame({"predictions": list(out)})


def _named_inputs(model: Any) -> bool:
    schema = model.metadata.get_input_schema()
    return bool(schema is not None and schema.has_input_names())


class TorchModulePredictor(Predictor):
    """A torch module scoring a float32 matrix, as MLflow's pytorch pyfunc does (``data.to_numpy(float32)``)."""

    framework = "torch"
    input_datatype = "FP32"

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def _score(self, data: np.ndarray, **kwargs: Any) -> np.ndarray:
        import torch

        with torch.no_grad():
            out = self.module(torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32)))
        return out.numpy()


class PyfuncPredictor(Predictor):
    """An ``mlflow.pyfunc`` model (trusted code only): a DataFrame in, its predict's answer out."""

    framework = PYFUNC_PLATFORM
    takes_frame = True

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def _predict_pandas(self, data: pd.DataFrame, **kwargs: Any) -> Any:
        out = self.model.predict(data)
        return out.to_numpy() if isinstance(out, pd.DataFrame | pd.Series) else np.asarray(out)


def signature_specs(signature: Any) -> tuple[list[TensorSpec], list[TensorSpec]] | None:
    """A column-based MLflow signature as (inputs, outputs); None where it is absent or tensor-based."""
    if not isinstance(signature, dict) or not signature.get("inputs"):
        return None

    def columns(text: Any) -> list[TensorSpec] | None:
        doc = yaml.safe_load(text) if isinstance(text, str) else text
        if not isinstance(doc, list):
            return None
        specs = []
        for i, col in enumerate(doc):
            if not isinstance(col, dict) or col.get("type") == "tensor":
                return None
            specs.append(
                TensorSpec(str(col.get("name") or f"input_{i}"), _DATATYPES.get(col.get("type"), "FP64"), (-1,))
            )
        return specs

    inputs = columns(signature.get("inputs"))
    if not inputs:
        return None
    outputs = columns(signature.get("outputs")) or []
    return inputs, outputs
