"""``PredictorClient``: calls a predictor over the Open Inference Protocol with numpy/pandas in and out.

Tensors travel as raw bytes (``raw_input_contents``). A DataFrame or dict whose
columns share one numeric dtype and are exactly the model's inputs travels as
ONE 2-D tensor ``[rows, columns]`` in the model's column order (what the
predictor takes for tabular models: one conversion and one ``tobytes`` instead
of a tensor per column); anything else (mixed dtypes, strings, other columns)
as one 1-D tensor per column; a numpy array as one 2-D tensor.

The client learns a model's inputs once (``ModelMetadata``) and keeps a
request template per model. A served checkpoint it has not seen yet (the
response's ``model_version``) is checked against what it learned before the
answer is returned, so a model whose columns change is never scored with
columns in the wrong order.

The channel balances round-robin over every address the target resolves to
(``dns:///predictor:8001``, ``ipv4:10.0.0.1:8001,10.0.0.2:8001``) and retries
UNAVAILABLE, so a replica going away costs no failed calls; every call has a
deadline (``timeout_s``).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import pandas as pd

from trainwire.predictor import DataBatch
from trainwire_core.errors import TrainwireError, error_for_code
from trainwire_core.grpc_status import from_rpc_error
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_core.inference.codec import datatype_of, from_contents, from_raw, to_raw
from trainwire_core.serving import KEEPALIVE_CLIENT_OPTIONS, message_size_options, open_channel
from trainwire_core.tls import ClientTLS

# Name of the single tensor a 2-D numpy array is sent as.
MATRIX_INPUT = "input"
SERVICE = "inference.GRPCInferenceService"
# What trainwire's predictor calls itself in ServerMetadata.
TRAINWIRE_SERVER = "trainwire-predictor"
# Numpy kinds that travel as one 2-D tensor: bool, integers, floats.
_MATRIX_KINDS = frozenset("biuf")


def service_config(load_balancing: str = "round_robin", max_attempts: int = 3) -> str:
    """The channel's default service config: the balancing policy and a retry of UNAVAILABLE."""
    config: dict[str, Any] = {"loadBalancingConfig": [{load_balancing: {}}]}
    if max_attempts > 1:  # gRPC takes 2 to 5
        retry = {
            "maxAttempts": min(max_attempts, 5),
            "initialBackoff": "0.05s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }
        config["methodConfig"] = [{"name": [{"service": SERVICE}], "retryPolicy": retry}]
    return json.dumps(config)


def encode_request(model: str, data: DataBatch, version: str = "", request_id: str = "") -> pb.ModelInferRequest:
    """Builds a raw-contents ModelInferRequest: one 1-D tensor per DataFrame column or dict entry, or a 2-D array."""
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    if isinstance(data, pd.DataFrame):
        columns: Iterable[tuple[str, Any]] = ((str(c), data[c].to_numpy()) for c in data.columns)
    elif isinstance(data, dict):
        columns = ((str(k), np.asarray(v)) for k, v in data.items())
    else:
        arr = np.asarray(data)
        columns = [(MATRIX_INPUT, arr.reshape(-1, 1) if arr.ndim == 1 else arr)]
    for name, arr in columns:
        if arr.dtype == object or arr.dtype.kind in "US":
            arr = np.asarray(arr, dtype=object)
        request.inputs.add(name=name, datatype=datatype_of(arr.dtype), shape=arr.shape)
        request.raw_input_contents.append(to_raw(arr))
    return request


def decode_response(response: pb.ModelInferResponse) -> pd.DataFrame:
    """The outputs as a DataFrame: one column per 1-D output, ``name_<i>`` columns for a 2-D one."""
    raw = response.raw_output_contents
    columns: dict[str, np.ndarray] = {}
    for i, out in enumerate(response.outputs):
        if raw:
            arr = from_raw(raw[i], out.datatype, out.shape, out.name, f"raw_output_contents[{i}]")
        else:
            arr = from_contents(out.contents, out.datatype, out.shape, out.name, f"outputs[{i}].contents")
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim == 2:
            columns.update({f"{out.name}_{j}": arr[:, j] for j in range(arr.shape[1])})
        else:
            columns[out.name] = arr
    return pd.DataFrame(columns)


def _stream_error(response: pb.ModelStreamInferResponse) -> TrainwireError:
    params = response.infer_response.parameters
    code_name = params["error_code"].string_param if "error_code" in params else "INTERNAL"
    field = params["error_field"].string_param if "error_field" in params else ""
    code = getattr(grpc.StatusCode, code_name, grpc.StatusCode.UNKNOWN)
    return error_for_code(code, response.error_message, field)


@dataclass
class _Layout:
    """How one model takes a single 2-D tensor.

    ``columns`` is the model's column order (a tabular model), or None for a
    model whose only input is 2-D (the caller's column order is sent).
    ``verified`` holds the checkpoint ids whose inputs are known to be these.
    """

    name: str
    columns: pd.Index | None
    verified: set[str] = field(default_factory=set)
    # The last caller Index found equal to ``columns`` (slices of one frame share theirs).
    matched: pd.Index | None = None


def _layout_of(inputs: Any, trainwire: bool) -> _Layout | None:
    """The 2-D layout of a model's metadata inputs, or None when it takes tensors one per column only."""
    if len(inputs) == 1 and len(inputs[0].shape) == 2:
        return _Layout(inputs[0].name, None)
    names = [t.name for t in inputs]
    # One 2-D tensor for a tabular model is trainwire's; other servers get a tensor per column.
    if not trainwire or not names or MATRIX_INPUT in names or len(set(names)) != len(names):
        return None
    if any(len(t.shape) > 2 or (len(t.shape) == 2 and t.shape[1] != 1) for t in inputs):
        return None
    return _Layout(MATRIX_INPUT, pd.Index(names))


def _single_dtype(frame: pd.DataFrame) -> bool:
    # One block is one dtype: a cheap test (pandas internals, so guarded); else compare the dtypes.
    if getattr(getattr(frame, "_mgr", None), "nblocks", None) == 1:
        return True
    dtypes = frame.dtypes.to_numpy()
    return len(dtypes) > 0 and all(d == dtypes[0] for d in dtypes)


def _frame_matrix(frame: pd.DataFrame, layout: _Layout) -> np.ndarray | None:
    """The frame as one [rows, columns] array in the layout's column order, or None when it does not fit."""
    perm = None
    if layout.columns is not None:
        cols = frame.columns
        if cols is layout.matched:
            pass
        elif cols.equals(layout.columns):
            layout.matched = cols
        else:
            if len(cols) != len(layout.columns) or not cols.is_unique:
                return None
            perm = cols.get_indexer(layout.columns)
            if (perm < 0).any():
                return None
    if frame.shape[1] == 0 or not _single_dtype(frame):
        return None
    arr = frame.to_numpy()
    if arr.dtype.kind not in _MATRIX_KINDS:
        return None
    return arr if perm is None else arr[:, perm]


def _dict_matrix(data: dict[str, Any], layout: _Layout) -> np.ndarray | None:
    """1-D arrays of one dtype, named exactly as the model's columns, as one [rows, columns] array."""
    if layout.columns is None or len(data) != len(layout.columns):
        return None
    try:
        arrays = [data[c] for c in layout.columns]
    except KeyError:
        return None
    first = arrays[0]
    for arr in arrays:
        if type(arr) is not np.ndarray or arr.ndim != 1 or arr.dtype != first.dtype or len(arr) != len(first):
            return None
    if first.dtype.kind not in _MATRIX_KINDS:
        return None
    return np.column_stack(arrays)


def _little_endian(arr: np.ndarray) -> np.ndarray:
    little = arr.dtype.newbyteorder("<")
    return arr if arr.dtype == little else arr.astype(little)


@functools.lru_cache(maxsize=64)
def _datatype(dtype: np.dtype) -> str:
    return datatype_of(dtype)


def _same_columns(a: pd.Index | None, b: pd.Index | None) -> bool:
    return a is None and b is None or (a is not None and b is not None and a.equals(b))


class PredictorClient:
    """Calls a trainwire predictor (or any Open Inference Protocol server).

    Args:
        address: A gRPC target: ``host:port``, ``dns:///name:port`` (every address the name resolves
            to), or ``ipv4:10.0.0.1:8001,10.0.0.2:8001``. Calls are balanced over the addresses.
        timeout_s: Deadline of each unary call (``predict``: of everything it sends for one batch).
        max_message_bytes: Largest message to send or receive.
        tls: What to trust and present (default: the ``TRAINWIRE_TLS_*`` environment, else plaintext).
        token: Bearer token, when the predictor requires one (its ``auth_token``; default:
            ``$TRAINWIRE_PREDICTOR_TOKEN``, else ``$TRAINWIRE_TOKEN``).
        load_balancing: gRPC balancing policy over the target's addresses: ``round_robin`` (unready
            replicas are skipped) or ``pick_first``.
        max_attempts: Tries of a call that a replica answers UNAVAILABLE (a gRPC retry policy, within
            the deadline); 1: no retry.
        server_name: The name the server's TLS certificate must carry, when ``address`` is not it
            (a replica dialled by its IP address).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 60.0,
        max_message_bytes: int = 64 << 20,
        tls: ClientTLS | None = None,
        token: str | None = None,
        load_balancing: str = "round_robin",
        max_attempts: int = 3,
        server_name: str | None = None,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        if token is None:
            token = os.environ.get("TRAINWIRE_PREDICTOR_TOKEN") or os.environ.get("TRAINWIRE_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        tls = tls if tls is not None else ClientTLS.from_files()
        options: list[tuple[str, Any]] = [
            *message_size_options(max_message_bytes),
            *KEEPALIVE_CLIENT_OPTIONS,
            ("grpc.service_config", service_config(load_balancing, max_attempts)),
            ("grpc.enable_retries", 1),
        ]
        if server_name and tls is not None:
            # A replica dialled by its address answers with the certificate of the name it serves.
            options.append(("grpc.ssl_target_name_override", server_name))
        self.channel = open_channel(address, options, tls)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        self._infer = self.stub.ModelInfer
        # Learned once per client: (model, version) -> its 2-D layout (None: a tensor per column).
        self._layouts: dict[tuple[str, str], _Layout | None] = {}
        self._templates: dict[tuple[str, str, str, str], pb.ModelInferRequest] = {}
        self._output_columns: dict[str, pd.Index] = {}
        self._server_name: str | None = None

    # --- calls ------------------------------------------------------------------
    def _timeout(self, deadline: float | None) -> float:
        return self.timeout_s if deadline is None else max(deadline - time.monotonic(), 0.0)

    def _call(self, method: str, request: Any, deadline: float | None = None) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=self._timeout(deadline), metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    # --- what a model takes -------------------------------------------------------
    def _layout(self, model: str, version: str, deadline: float | None) -> _Layout | None:
        """The model's 2-D layout, asked for once (ModelMetadata); None: send a tensor per column."""
        key = (model, version)
        try:
            return self._layouts[key]
        except KeyError:
            pass
        try:
            meta = self._call("ModelMetadata", pb.ModelMetadataRequest(name=model, version=version), deadline)
            if self._server_name is None:
                self._server_name = self._call("ServerMetadata", pb.ServerMetadataRequest(), deadline).name
        except TrainwireError as err:
            # Not known yet (or not allowed): this batch goes per column and the call itself says why.
            if err.code == grpc.StatusCode.UNIMPLEMENTED:
                self._layouts[key] = None
            return None
        layout = _layout_of(meta.inputs, self._server_name == TRAINWIRE_SERVER)
        self._layouts[key] = layout
        return layout

    def _trusted(
        self, model: str, version: str, layout: _Layout, response: pb.ModelInferResponse, deadline: float | None = None
    ) -> bool:
        """Whether the checkpoint that answered takes the layout's columns (checked once per checkpoint).

        False means the model's inputs changed: the layout is forgotten and the batch must go per column.
        """
        served = response.model_version
        if served in layout.verified:
            return True
        try:
            meta = self._call("ModelMetadata", pb.ModelMetadataRequest(name=model, version=served), deadline)
            fresh = _layout_of(meta.inputs, layout.columns is not None)
        except TrainwireError:
            fresh = None
        if fresh is not None and fresh.name == layout.name and _same_columns(fresh.columns, layout.columns):
            layout.verified.add(served)
            return True
        self._layouts.pop((model, version), None)
        return False

    # --- requests and responses ---------------------------------------------------
    def _matrix_request(
        self, model: str, version: str, name: str, arr: np.ndarray, request_id: str
    ) -> pb.ModelInferRequest:
        """One 2-D tensor from the per-model template: one ``tobytes``, no per-column work."""
        datatype = _datatype(arr.dtype)
        key = (model, version, name, datatype)
        template = self._templates.get(key)
        if template is None:
            template = pb.ModelInferRequest(model_name=model, model_version=version)
            template.inputs.add(name=name, datatype=datatype)
            self._templates[key] = template
        request = pb.ModelInferRequest()
        request.CopyFrom(template)
        if request_id:
            request.id = request_id
        request.inputs[0].shape.extend(arr.shape)
        request.raw_input_contents.append(_little_endian(arr).tobytes())
        return request

    def _encode(
        self, model: str, data: DataBatch, version: str, request_id: str, deadline: float | None, learn: bool = True
    ) -> tuple[pb.ModelInferRequest, _Layout | None]:
        """The request for a batch, and the layout it used (None: per column, or the caller's array)."""
        if isinstance(data, pd.DataFrame | dict):
            layout = self._layout(model, version, deadline) if learn else self._layouts.get((model, version))
            if layout is not None:
                arr = _frame_matrix(data, layout) if isinstance(data, pd.DataFrame) else _dict_matrix(data, layout)
                if arr is not None:
                    return self._matrix_request(model, version, layout.name, arr, request_id), layout
            return encode_request(model, data, version, request_id), None
        arr = np.asarray(data)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if arr.dtype.kind in _MATRIX_KINDS:
            return self._matrix_request(model, version, MATRIX_INPUT, arr, request_id), None
        return encode_request(model, arr, version, request_id), None

    def _decode(self, response: pb.ModelInferResponse) -> pd.DataFrame:
        """``decode_response``, with a shortcut for the common answer: one raw numeric column."""
        outputs = response.outputs
        raw = response.raw_output_contents
        if len(outputs) == 1 and len(raw) == 1:
            out = outputs[0]
            shape = out.shape
            if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
                arr = from_raw(raw[0], out.datatype, shape, out.name, "raw_output_contents[0]")
                if arr.dtype != object:
                    columns = self._output_columns.get(out.name)
                    if columns is None:  # building an Index costs more than the rest of the frame
                        columns = self._output_columns[out.name] = pd.Index([out.name])
                    # Copies: frombuffer views are read-only, and callers may write to their frames.
                    return pd.DataFrame(arr.reshape(-1, 1).copy(), columns=columns.copy(), copy=False)
        return decode_response(response)

    # --- the API --------------------------------------------------------------------
    def predict(self, model: str, data: DataBatch, *, version: str = "") -> pd.DataFrame:
        """Scores one batch with a model (a run name or id); ``version`` picks a checkpoint (default: best)."""
        deadline = time.monotonic() + self.timeout_s
        request, layout = self._encode(model, data, version, "", deadline)
        try:
            response = self._infer(request, timeout=self._timeout(deadline), metadata=self._metadata)
        except grpc.RpcError as err:
            if layout is None or err.code() != grpc.StatusCode.INVALID_ARGUMENT:
                raise from_rpc_error(err) from None
            # The model no longer takes this layout: forget it and send the batch per column.
            self._layouts.pop((model, version), None)
            return self._decode(self._call("ModelInfer", encode_request(model, data, version), deadline))
        if layout is not None and not self._trusted(model, version, layout, response, deadline):
            response = self._call("ModelInfer", encode_request(model, data, version), deadline)
        return self._decode(response)

    def stream(
        self, model: str, batches: Iterable[DataBatch], *, version: str = "", raise_errors: bool = True
    ) -> Iterator[pd.DataFrame | TrainwireError]:
        """Scores batches over one bidirectional stream; yields one DataFrame per batch, in order.

        A batch the predictor rejects raises its TrainwireError, or, with
        ``raise_errors=False``, is yielded as that error and the stream goes on.
        """
        self._layout(model, version, time.monotonic() + self.timeout_s)
        counter = itertools.count()
        # Each answer comes in request order: what was sent, to re-send per column if need be.
        sent: deque[tuple[DataBatch, _Layout | None]] = deque()

        def requests() -> Iterator[pb.ModelInferRequest]:
            for batch in batches:
                request, layout = self._encode(model, batch, version, str(next(counter)), None, learn=False)
                sent.append((batch, layout))
                yield request

        try:
            for response in self.stub.ModelStreamInfer(requests(), metadata=self._metadata):
                batch, layout = sent.popleft()
                result: pd.DataFrame | TrainwireError
                if response.error_message:
                    result = _stream_error(response)
                    if layout is not None and result.code == grpc.StatusCode.INVALID_ARGUMENT:
                        self._layouts.pop((model, version), None)
                        result = self._per_column(model, batch, version)
                elif layout is not None and not self._trusted(model, version, layout, response.infer_response):
                    result = self._per_column(model, batch, version)
                else:
                    result = self._decode(response.infer_response)
                if isinstance(result, TrainwireError):
                    if raise_errors:
                        raise result
                yield result
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def _per_column(self, model: str, batch: DataBatch, version: str) -> pd.DataFrame | TrainwireError:
        try:
            return self._decode(self._call("ModelInfer", encode_request(model, batch, version)))
        except TrainwireError as err:
            return err

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """The model's versions, platform, inputs and outputs."""
        from google.protobuf import json_format

        response = self._call("ModelMetadata", pb.ModelMetadataRequest(name=model, version=version))
        return json_format.MessageToDict(response, preserving_proto_field_name=True)

    def inference_statistics(self, model: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's cumulative statistics per model version (all models when ``model`` is empty)."""
        from google.protobuf import json_format

        response = self._call("ModelStatistics", pb.ModelStatisticsRequest(name=model, version=version))
        return [json_format.MessageToDict(m, preserving_proto_field_name=True) for m in response.model_stats]

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return self._call("ModelReady", pb.ModelReadyRequest(name=model, version=version)).ready

    def is_server_live(self) -> bool:
        return self._call("ServerLive", pb.ServerLiveRequest()).live

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> PredictorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_table(path: str) -> pd.DataFrame:
    if path.endswith(".parquet"):
        return pd.read_parquet(path)
    if path.endswith(".csv"):
        return pd.read_csv(path)
    raise SystemExit(f"--input must be a .csv or .parquet file, got {path}")


def predict_main(argv: list[str] | None = None) -> int:
    """``trainwire predict``: scores a CSV or Parquet file with a served model."""
    import argparse
    import os
    import sys

    parser = argparse.ArgumentParser(prog="trainwire predict", description="Score a file with a served model.")
    parser.add_argument("--address", default="localhost:8001", help="predictor host:port")
    parser.add_argument("--model", required=True, help="run name or run id")
    parser.add_argument("--version", default="", help="checkpoint id (default: the run's best, else latest)")
    parser.add_argument("--input", required=True, help="a .csv or .parquet file of input rows")
    parser.add_argument("--output", help="write predictions to this .csv (default: stdout)")
    parser.add_argument(
        "--token",
        default=os.environ.get("TRAINWIRE_PREDICTOR_TOKEN"),
        help="bearer token of a predictor that needs one",
    )
    args = parser.parse_args(argv)
    frame = _read_table(args.input)
    try:
        with PredictorClient(args.address, token=args.token) as client:
            out = client.predict(args.model, frame, version=args.version)
    except TrainwireError as err:
        field = f" ({err.field})" if err.field else ""
        print(f"error: {err.code.name}{field}: {err}", file=sys.stderr)
        return 1
    if args.output:
        out.to_csv(args.output, index=False)
    else:
        out.to_csv(sys.stdout, index=False)
    return 0
