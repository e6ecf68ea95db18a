"""KServe v2 JSON bodies (and Triton's binary tensor data extension) <-> the data plane's requests and answers.

A request body is a JSON object, optionally followed by binary tensor data:
then the ``Inference-Header-Content-Length`` header gives the JSON's length, and
each input with ``parameters.binary_data_size`` takes that many bytes of the
rest, in input order (raw little-endian, BYTES elements length-prefixed, as
gRPC's raw contents). Outputs travel as JSON ``data`` unless the request asks
for binary (``parameters.binary_data`` on an output, or
``parameters.binary_data_output`` for every output: what ``tritonclient.http``
sends by default); the answer is then laid out the same way. An input or output
with ``parameters.shared_memory_region`` (and ``shared_memory_byte_size``,
``shared_memory_offset``) lies in a registered shared memory region instead
(Triton's system shared memory extension); the answer then names such an output with no data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.http import dumps
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, InputTensor, datatype_name, raw_bytes
from trainwire_predictor.shared_memory import REGION, region_ref

HEADER_LENGTH = "inference-header-content-length"
JSON_TYPE = "application/json"
BINARY_TYPE = "application/octet-stream"


class OutputForm:
    """Which outputs of one request are answered as binary data."""

    __slots__ = ("default", "binary")

    def __init__(self, default: bool, binary: dict[str, bool]) -> None:
        self.default = default
        self.binary = binary

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default)


def parse_json(data: bytes | memoryview, what: str = "the request body") -> Any:
    """Parses JSON, or says why not as INVALID_ARGUMENT."""
    try:
        # orjson: a tenth of the json module's time on a request of a thousand floats.
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{what} is not valid JSON: {exc}", field="body") from None


def _parameters(owner: dict[str, Any], field: str) -> dict[str, Any] | None:
    """``owner``'s parameters: None when absent, else a JSON object (``null`` is refused: the protocol's
    schema has parameters an object, and a client that sends null meant something)."""
    if "parameters" not in owner:
        return None
    params = owner["parameters"]
    if not isinstance(params, dict):
        raise InvalidArgumentError(f"{field} must be a JSON object", field=field)
    return params


def _param(params: Any, key: str, field: str) -> Any:
    if params is None:
        return None
    if not isinstance(params, dict):
        raise InvalidArgumentError(f"{field} must be a JSON object", field=field)
    return params.get(key)


def _flag(params: Any, key: str, field: str) -> bool:
    value = _param(params, key, field)
    if value is not None and not isinstance(value, bool):
        raise InvalidArgumentError(f"{field}.{key} must be true or false", field=f"{field}.{key}")
    return bool(value)


def parse_infer_request(
    body: bytes, header_length: str | None, model_name: str, model_version: str, routing_key: str = ""
) -> tuple[InferenceRequest, OutputForm]:
    """The protocol-neutral request of an ``/infer`` body, and the form its answer takes.

    ``parameters.routing_key`` wins over ``routing_key`` (the ``routing-key`` header).

    Raises:
        InvalidArgumentError: Malformed JSON, a field of the wrong type, a bad header
            length, or binary data that does not add up (the field names where).
    """
    view = memoryview(body)
    if header_length is not None:
        try:
            json_size = int(header_length)
        except ValueError:
            json_size = -1
        if not 0 <= json_size <= len(body):
            raise InvalidArgumentError(
                f"Inference-Header-Content-Length {header_length!r} is not a length within the {len(body)}-byte body",
                field="Inference-Header-Content-Length",
            )
        head, binary = view[:json_size], view[json_size:]
    else:
        head, binary = view, view[len(view) :]
    doc = parse_json(head)
    if not isinstance(doc, dict):
        raise InvalidArgumentError("the request body must be a JSON object", field="body")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError("id must be a string", field="id")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgumentError("the request needs an inputs list", field="inputs")
    inputs, offset, shared = [], 0, False
    for i, spec in enumerate(raw_inputs):
        field = f"inputs[{i}]"
        if not isinstance(spec, dict):
            raise InvalidArgumentError(f"{field} must be a JSON object", field=field)
        name, datatype, shape = spec.get("name"), spec.get("datatype"), spec.get("shape")
        if not isinstance(name, str):
            raise InvalidArgumentError(f"{field}.name must be a string", field=f"{field}.name")
        if not isinstance(datatype, str):
            raise InvalidArgumentError(f"{field}.datatype must be a string", field=f"{field}.datatype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise InvalidArgumentError(f"{field}.shape must be a list of integers", field=f"{field}.shape")
        params = _parameters(spec, f"{field}.parameters")
        size = _param(params, "binary_data_size", f"{field}.parameters")
        ref = region_ref(params, f"{field}.parameters") if params and REGION in params else None
        if ref is not None:
            shared = True
            inputs.append(InputTensor(name, datatype, shape, ref, f"{field}.parameters.{REGION}"))
        elif size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise InvalidArgumentError(
                    f"{field}.parameters.binary_data_size {size!r} runs past the {len(binary)} bytes of binary data",
                    field=f"{field}.parameters.binary_data_size",
                )
            inputs.append(InputTensor(name, datatype, shape, binary[offset : offset + size], f"{field}.binary_data"))
            offset += size
        else:
            data = spec.get("data")
            if not isinstance(data, list):
                raise InvalidArgumentError(
                    f"{field} needs data (a list) or parameters.binary_data_size", field=f"{field}.data"
                )
            inputs.append(InputTensor(name, datatype, shape, data, f"{field}.data"))
    if offset != len(binary):
        raise InvalidArgumentError(
            f"the body holds {len(binary)} bytes of binary data but the inputs take {offset}", field="body"
        )
    outputs, binary_outputs, regions = [], {}, {}
    raw_outputs = doc.get("outputs", [])
    if not isinstance(raw_outputs, list):
        raise InvalidArgumentError("outputs must be a list", field="outputs")
    for i, spec in enumerate(raw_outputs):
        field = f"outputs[{i}]"
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str):
            raise InvalidArgumentError(f"{field}.name must be a string", field=f"{field}.name")
        outputs.append(name)
        params = _parameters(spec, f"{field}.parameters")
        binary_outputs[name] = _flag(params, "binary_data", f"{field}.parameters")
        if params and REGION in params and (ref := region_ref(params, f"{field}.parameters")) is not None:
            regions[name] = ref
    request_params = _parameters(doc, "parameters")
    default = _flag(request_params, "binary_data_output", "parameters")
    key = _param(request_params, "routing_key", "parameters")
    if key is not None:
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise InvalidArgumentError(
                "parameters.routing_key must be a string or an integer", field="parameters.routing_key"
            )
        routing_key = str(key)
    request = InferenceRequest(
        model_name, model_version, request_id, inputs, outputs, routing_key, regions or None, shared or bool(regions)
    )
    return request, OutputForm(default, binary_outputs)


def _json_data(arr: np.ndarray) -> list[Any]:
    flat = arr.ravel()
    if datatype_name(arr.dtype) == "BYTES":
        return [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v) for v in flat]
    return flat.tolist()


def encode_infer_response(response: InferenceResponse, form: OutputForm) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an ``/infer`` answer (JSON, then binary outputs when asked for)."""
    outputs, blobs = [], []
    regions = response.output_regions
    for name, arr in response.outputs:
        tensor: dict[str, Any] = {"name": name, "datatype": datatype_name(arr.dtype), "shape": list(arr.shape)}
        if regions and name in regions:
            # Written into its region: name, datatype and shape only, as Triton answers (its C++
            # client, perf_analyzer's, reads an output's parameters as binary_data_size).
            pass
        elif form.is_binary(name):
            blob = raw_bytes(arr)
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = _json_data(arr)
        outputs.append(tensor)
    doc = {"model_name": response.model_name, "model_version": response.model_version, "outputs": outputs}
    if response.id:
        doc["id"] = response.id
    head = dumps(doc)
    if not blobs:
        return head, {"content-type": JSON_TYPE}
    return b"".join([head, *blobs]), {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(head))}
