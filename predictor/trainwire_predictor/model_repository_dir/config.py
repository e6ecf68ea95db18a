"""A model folder's configuration: Triton's ``config.pbtxt``, MLServer's ``model-settings.json``, or file suffixes.

``config.pbtxt`` is parsed with protobuf's text format into the ``ModelConfig`` message the
predictor answers Triton's model-configuration extension with (the subset trainwire applies:
name, platform, backend, version_policy, max_batch_size, input, output, dynamic_batching,
instance_group, parameters; fields beyond it, such as ``optimization``, are read past). Its
``max_batch_size``, ``dynamic_batching`` and ``instance_group`` become the model's
``Scheduling``, applied as Triton applies them (``loaders.apply_scheduling``). A
``model-settings.json`` is MLServer's: ``implementation``, ``parameters.uri``, ``inputs``, ``outputs``;
with MLServer's MLflow runtime (``mlserver_mlflow.MLflowRuntime``) its ``parameters.uri`` is an
MLflow model URI (``models:/name/3``, ``models:/name@alias``, ``runs:/<id>/<path>``) served through
the predictor's MLflow models (what ``mlflow deployments create -t trainwire`` writes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import text_format

from trainwire_core.errors import FailedPreconditionError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_predictor.models import TensorSpec

TRITON_CONFIG = "config.pbtxt"
MLSERVER_SETTINGS = "model-settings.json"

# The frameworks a repository model is served by (``LoadedModel.framework``): trainwire's own
# names for the tabular ones (their platform comes from the framework table), Triton's platform
# names for the tensor ones (which trainwire has no framework entry for).
XGBOOST, LIGHTGBM, SKLEARN = "xgboost", "lightgbm", "sklearn"
ONNX, TORCHSCRIPT = "onnxruntime_onnx", "pytorch_libtorch"
FRAMEWORKS = (XGBOOST, LIGHTGBM, SKLEARN, ONNX, TORCHSCRIPT)

# Platform or backend (Triton), implementation (MLServer) or format name (KServe) -> framework.
_NAMED = {
    "onnxruntime_onnx": ONNX,
    "onnxruntime": ONNX,
    "onnx": ONNX,
    "pytorch_libtorch": TORCHSCRIPT,
    "pytorch": TORCHSCRIPT,
    "libtorch": TORCHSCRIPT,
    "torchscript": TORCHSCRIPT,
    "xgboost": XGBOOST,
    "lightgbm": LIGHTGBM,
    "sklearn": SKLEARN,
    "mlserver_xgboost.XGBoostModel": XGBOOST,
    "mlserver_lightgbm.LightGBMModel": LIGHTGBM,
    "mlserver_sklearn.SKLearnModel": SKLEARN,
}
# MLServer's MLflow runtime: parameters.uri is an MLflow model URI, served as MLflow models are.
MLSERVER_MLFLOW = "mlserver_mlflow.MLflowRuntime"
MLFLOW_SCHEMES = ("models:/", "runs:/")
# Triton's FIL backend names the tree model's format in parameters { key: "model_type" }.
_FIL_MODEL_TYPES = {
    "xgboost": XGBOOST,
    "xgboost_json": XGBOOST,
    "xgboost_ubj": XGBOOST,
    "lightgbm": LIGHTGBM,
}
# A model file's suffix -> framework, where no configuration names one.
SUFFIXES = {
    ".json": XGBOOST,
    ".ubj": XGBOOST,
    ".txt": LIGHTGBM,
    ".onnx": ONNX,
    ".pt": TORCHSCRIPT,
    ".joblib": SKLEARN,
    ".pkl": SKLEARN,
    ".pickle": SKLEARN,
}
# Triton's default model file names per framework (its ``default_model_filename``).
DEFAULT_FILES = {
    ONNX: ("model.onnx",),
    TORCHSCRIPT: ("model.pt",),
    XGBOOST: ("xgboost.json", "xgboost.ubj", "model.json", "model.ubj", "xgboost.model"),
    LIGHTGBM: ("model.txt",),
    SKLEARN: ("model.joblib", "model.pkl"),
}
# config.pbtxt's default_model_filename is beyond the message's subset: read it from the text.
_DEFAULT_FILENAME = re.compile(r'^\s*default_model_filename\s*:\s*"([^"]*)"', re.MULTILINE)
# The protocol's datatypes by Triton's config names (TYPE_STRING is BYTES).
_DATATYPES = {name: name[len("TYPE_") :] for name in pb.DataType.keys() if name not in ("TYPE_INVALID",)}
_DATATYPES["TYPE_STRING"] = "BYTES"


@dataclass(frozen=True)
class VersionPolicy:
    """Triton's ``version_policy``: the newest ``latest`` versions (default 1), every one, or those named."""

    latest: int = 1
    all: bool = False
    specific: tuple[int, ...] = ()

    def select(self, versions: list[int]) -> list[int]:
        """The served versions among those found, oldest first."""
        found = sorted(versions)
        if self.all:
            return found
        if self.specific:
            return [v for v in found if v in self.specific]
        return found[-max(1, self.latest) :]

    def describe(self) -> str:
        if self.all:
            return "all"
        if self.specific:
            return "specific " + ", ".join(map(str, self.specific))
        return f"latest {max(1, self.latest)}"


@dataclass(frozen=True)
class Scheduling:
    """How a ``config.pbtxt`` has its model called, as Triton does.

    Attributes:
        max_batch_size: Most rows in one request and in one model call (0: the model does not batch).
        dynamic_batching: Whether requests are joined (Triton's ``dynamic_batching``); without it each
            request is its own model call.
        max_queue_delay_us: Longest a request waits for others before its call starts.
        preferred_batch_sizes: Row counts at which a call starts at once.
        instances: Model calls that may run at the same time (the instance groups' counts; 0: not said).
    """

    max_batch_size: int = 0
    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 0


@dataclass(frozen=True)
class ModelSettings:
    """What a model folder's configuration says (every field optional).

    Attributes:
        framework: One of ``FRAMEWORKS``; "" where the model file's suffix decides.
        filename: The model file within a version folder ("": the framework's default, else the one file found).
        inputs: Declared inputs with the batch dimension (-1) first where the model batches.
        outputs: Declared outputs, likewise.
        policy: Which version folders are served.
        source: The configuration file read ("" where there is none).
        flat: MLServer's layout: the model folder itself is the one version (no version folders).
        scheduling: A ``config.pbtxt``'s batching and instances (None: no ``config.pbtxt``; the
            predictor's own batching then applies).
        mlflow_uri: The MLflow model the folder stands for (MLServer's MLflow runtime; "": none):
            its versions and files are MLflow's, and the folder holds only the settings.
    """

    framework: str = ""
    filename: str = ""
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    policy: VersionPolicy = field(default_factory=VersionPolicy)
    source: str = ""
    flat: bool = False
    scheduling: Scheduling | None = None
    mlflow_uri: str = ""


def _bad(source: str, message: str) -> FailedPreconditionError:
    return FailedPreconditionError(f"model repository configuration {source}: {message}", field="model_name")


def framework_named(name: str, source: str) -> str:
    """The framework a platform, backend or implementation names.

    Raises:
        FailedPreconditionError: One the predictor does not serve (naming ``source``).
    """
    found = _NAMED.get(name) or _NAMED.get(name.lower())
    if found is None:
        served = ", ".join(sorted(k for k in _NAMED if "." not in k))
        raise _bad(
            source,
            f"{name!r} is not served here; the predictor serves {served}, MLServer's sklearn, "
            "xgboost and lightgbm implementations and its MLflow runtime (mlserver_mlflow.MLflowRuntime)",
        )
    return found


def parse_triton(text: str, source: str) -> ModelSettings:
    """A ``config.pbtxt``'s settings.

    Raises:
        FailedPreconditionError: Not Triton's text format, or a platform not served (naming ``source``).
    """
    config = pb.ModelConfig()
    try:
        text_format.Parse(text, config, allow_unknown_field=True)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        message = str(exc).split(" : ", 1)[-1] if line else str(exc)
        where = f"line {line}, column {column}: " if line else ""
        raise _bad(source, f"{where}{message} (Triton's text format)") from None
    framework = ""
    if config.backend == "fil":
        model_type = config.parameters["model_type"].string_value if "model_type" in config.parameters else "xgboost"
        framework = _FIL_MODEL_TYPES.get(model_type, "")
        if not framework:
            raise _bad(source, f"FIL model_type {model_type!r} is not served; use one of {', '.join(_FIL_MODEL_TYPES)}")
    elif config.platform or config.backend:
        framework = framework_named(config.platform or config.backend, source)
    batch = (-1,) if config.max_batch_size > 0 else ()

    def specs(tensors: Any, kind: str) -> tuple[TensorSpec, ...]:
        out = []
        for i, tensor in enumerate(tensors):
            if not tensor.name:
                raise _bad(source, f"{kind} {i} has no name")
            datatype = _DATATYPES.get(pb.DataType.Name(tensor.data_type), "")
            if not datatype:
                raise _bad(source, f"{kind} {tensor.name!r} has no data_type")
            out.append(TensorSpec(tensor.name, datatype, (*batch, *(int(d) for d in tensor.dims))))
        return tuple(out)

    which = config.version_policy.WhichOneof("policy_choice")
    if which == "all":
        policy = VersionPolicy(all=True)
    elif which == "specific":
        if not config.version_policy.specific.versions:
            raise _bad(source, "version_policy specific names no versions")
        policy = VersionPolicy(specific=tuple(int(v) for v in config.version_policy.specific.versions))
    elif which == "latest":
        policy = VersionPolicy(latest=max(1, config.version_policy.latest.num_versions))
    else:
        policy = VersionPolicy()
    match = _DEFAULT_FILENAME.search(text)
    filename = match.group(1) if match else ""
    if filename and not _plain_name(filename):
        raise _bad(source, f"default_model_filename {filename!r} is not a plain file name")
    return ModelSettings(
        framework,
        filename,
        specs(config.input, "input"),
        specs(config.output, "output"),
        policy,
        source,
        scheduling=_scheduling(config, source),
    )


def _scheduling(config: pb.ModelConfig, source: str) -> Scheduling:
    """The config's max_batch_size, dynamic_batching and instance_group, checked as Triton checks them.

    Raises:
        FailedPreconditionError: A GPU instance group (the predictor runs repository models on CPU),
            a negative size, or dynamic batching that cannot apply (naming the field).
    """
    if config.max_batch_size < 0:
        raise _bad(source, f"max_batch_size must not be negative (it is {config.max_batch_size})")
    instances = 0
    for i, group in enumerate(config.instance_group):
        kind = pb.ModelInstanceGroup.Kind.Name(group.kind)
        if kind == "KIND_GPU":
            raise _bad(
                source,
                f"instance_group[{i}].kind is KIND_GPU; this predictor runs repository models on CPU "
                "(onnxruntime's CPU provider, TorchScript on the CPU): use KIND_CPU",
            )
        if group.count < 0:
            raise _bad(source, f"instance_group[{i}].count must not be negative (it is {group.count})")
        instances += group.count or 1  # Triton's default count for a CPU group is 1
    if not config.HasField("dynamic_batching"):
        return Scheduling(config.max_batch_size, instances=instances)
    batching = config.dynamic_batching
    if config.max_batch_size == 0:
        raise _bad(source, "dynamic_batching needs max_batch_size > 0 (a model that batches)")
    preferred = tuple(int(n) for n in batching.preferred_batch_size)
    wrong = [n for n in preferred if not 1 <= n <= config.max_batch_size]
    if wrong:
        raise _bad(
            source,
            f"dynamic_batching.preferred_batch_size {wrong[0]} is not within 1..max_batch_size "
            f"({config.max_batch_size})",
        )
    return Scheduling(
        config.max_batch_size, True, int(batching.max_queue_delay_microseconds), preferred, instances=instances
    )


def parse_mlserver(text: str, source: str) -> ModelSettings:
    """A ``model-settings.json``'s settings (MLServer's).

    Raises:
        FailedPreconditionError: Not such a JSON object, or an implementation not served (naming ``source``).
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(source, f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _bad(source, "must be a JSON object")
    implementation = doc.get("implementation") or ""
    if not isinstance(implementation, str):
        raise _bad(source, "implementation must be a string")
    parameters = doc.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise _bad(source, "parameters must be an object")
    uri = parameters.get("uri") or ""
    if not isinstance(uri, str):
        raise _bad(source, "parameters.uri must be a string")
    if implementation == MLSERVER_MLFLOW:
        if not uri.startswith(MLFLOW_SCHEMES) or len(uri) <= len("runs:/"):
            raise _bad(
                source,
                f"parameters.uri {uri!r}: MLServer's MLflow runtime here takes an MLflow model URI "
                "(models:/<name>/<version>, models:/<name>@<alias> or runs:/<run id>/<path>)",
            )
        return ModelSettings(source=source, flat=True, mlflow_uri=uri)
    framework = framework_named(implementation, source) if implementation else ""
    filename = uri[2:] if uri.startswith("./") else uri
    if filename and not _plain_name(filename):
        raise _bad(source, f"parameters.uri {uri!r} must name a file in the model's folder")

    def specs(key: str) -> tuple[TensorSpec, ...]:
        items = doc.get(key) or []
        if not isinstance(items, list):
            raise _bad(source, f"{key} must be a list")
        out = []
        for i, item in enumerate(items):
            try:
                out.append(TensorSpec(str(item["name"]), str(item["datatype"]), tuple(int(d) for d in item["shape"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise _bad(source, f"{key}[{i}] needs name, datatype and shape ({exc!r})") from None
        return tuple(out)

    return ModelSettings(framework, filename, specs("inputs"), specs("outputs"), VersionPolicy(), source)


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and name.isprintable()
