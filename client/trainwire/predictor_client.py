"""``PredictorClient``: calls a predictor over the Open Inference Protocol with numpy/pandas in and out.

Tensors travel as raw bytes (``raw_input_contents``): one 1-D tensor per
DataFrame column or dict entry, or one 2-D tensor for a numpy array.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
import numpy as np
import pandas as pd

from trainwire.errors import TrainwireError, error_for_code
from trainwire.grpc_status import from_rpc_error
from trainwire.inference import grpc_service_pb2 as pb
from trainwire.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire.inference.codec import datatype_of, from_contents, from_raw, to_raw
from trainwire.predictor import DataBatch
from trainwire.serving import message_size_options
from trainwire.tls import ClientTLS, open_channel

# Name of the single tensor a 2-D numpy array is sent as.
MATRIX_INPUT = "input"


def encode_request(model: str, data: DataBatch, version: str = "", request_id: str = "") -> pb.ModelInferRequest:
    """Builds a raw-contents ModelInferRequest from a DataFrame, a dict of 1-D arrays or a 2-D array."""
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


class PredictorClient:
    """Calls a trainwire predictor (or any Open Inference Protocol server).

    Args:
        address: ``host:port`` of the predictor.
        timeout_s: Deadline of each unary call.
        max_message_bytes: Largest message to send or receive.
        tls: What to trust and present (default: the ``TRAINWIRE_TLS_*`` environment, else plaintext).
        token: Bearer token, when the predictor requires one (its ``auth_token``).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 60.0,
        max_message_bytes: int = 64 << 20,
        tls: ClientTLS | None = None,
        token: str | None = None,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        tls = tls if tls is not None else ClientTLS.from_files()
        self.channel = open_channel(address, message_size_options(max_message_bytes), tls)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def predict(self, model: str, data: DataBatch, *, version: str = "") -> pd.DataFrame:
        """Scores one batch with a model (a run name or id); ``version`` picks a checkpoint (default: best)."""
        return decode_response(self._call("ModelInfer", encode_request(model, data, version)))

    def stream(
        self, model: str, batches: Iterable[DataBatch], *, version: str = "", raise_errors: bool = True
    ) -> Iterator[pd.DataFrame | TrainwireError]:
        """Scores batches over one bidirectional stream; yields one DataFrame per batch, in order.

        A batch the predictor rejects raises its TrainwireError, or, with
        ``raise_errors=False``, is yielded as that error and the stream goes on.
        """
        counter = itertools.count()
        requests = (encode_request(model, b, version, str(next(counter))) for b in batches)
        try:
            for response in self.stub.ModelStreamInfer(requests, metadata=self._metadata):
                if response.error_message:
                    err = _stream_error(response)
                    if raise_errors:
                        raise err
                    yield err
                else:
                    yield decode_response(response.infer_response)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

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
