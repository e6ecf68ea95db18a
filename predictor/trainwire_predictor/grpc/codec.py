"""ModelInferRequest <-> InferenceRequest, InferenceResponse -> ModelInferResponse (the gRPC front end's only work).

Tensors stay undecoded on the way in: raw contents travel as bytes, typed
contents as the repeated field of their datatype; the data plane decodes them.
"""

from __future__ import annotations

from typing import Any

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference.codec import CONTENTS_FIELDS, fill_contents
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, InputTensor, datatype_name, raw_bytes


def routing_key_of(parameters: Any) -> str:
    """The ``routing_key`` request parameter, as text ("" when absent)."""
    if "routing_key" not in parameters:
        return ""
    param = parameters["routing_key"]
    kind = param.WhichOneof("parameter_choice")
    return "" if kind is None else str(getattr(param, kind))


def request_from_proto(request: pb.ModelInferRequest, routing_key: str = "") -> InferenceRequest:
    """The protocol-neutral request; checks only what is particular to protobuf (raw vs typed contents).

    The ``routing_key`` parameter wins over ``routing_key`` (the call's ``routing-key`` metadata).

    Raises:
        InvalidArgumentError: raw contents that do not match the inputs one to one, an input
            with both, or typed contents in another datatype's field.
    """
    inputs = request.inputs
    raw = request.raw_input_contents
    if raw and len(raw) != len(inputs):
        raise InvalidArgumentError(
            f"raw_input_contents has {len(raw)} entries for {len(inputs)} inputs; send one per input, in order",
            field="raw_input_contents",
        )
    tensors = []
    for i, tensor in enumerate(inputs):
        if raw:
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"input {tensor.name!r} has typed contents while the request uses raw_input_contents; "
                    "send every input one way or the other",
                    field=f"inputs[{i}].contents",
                )
            tensors.append(InputTensor(tensor.name, tensor.datatype, tensor.shape, raw[i], f"raw_input_contents[{i}]"))
        else:
            field = f"inputs[{i}].contents"
            tensors.append(InputTensor(tensor.name, tensor.datatype, tensor.shape, _typed(tensor, field), field))
    return InferenceRequest(
        request.model_name,
        request.model_version,
        request.id,
        tensors,
        [out.name for out in request.outputs],
        routing_key_of(request.parameters) or routing_key,
    )


def _typed(tensor: pb.ModelInferRequest.InferInputTensor, field: str) -> list:
    """The repeated field that carries a tensor's datatype; only that one may be set."""
    own = CONTENTS_FIELDS.get(tensor.datatype)
    if own is None:
        if tensor.datatype == "FP16":
            raise InvalidArgumentError(
                f"tensor {tensor.name!r}: FP16 has no typed contents field; send it in raw_input_contents",
                field=field,
            )
        return []  # an unknown datatype: the data plane names it
    others = [f.name for f, _ in tensor.contents.ListFields() if f.name != own]
    if others:
        raise InvalidArgumentError(
            f"tensor {tensor.name!r} of datatype {tensor.datatype} must use contents.{own}, not contents.{others[0]}",
            field=field,
        )
    return getattr(tensor.contents, own)


def response_to_proto(response: InferenceResponse, raw: bool) -> pb.ModelInferResponse:
    """The ModelInferResponse: raw output contents when the request was raw, typed contents otherwise."""
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for name, arr in response.outputs:
        tensor = message.outputs.add(name=name, datatype=datatype_name(arr.dtype), shape=arr.shape)
        if raw:
            message.raw_output_contents.append(raw_bytes(arr))
        else:
            fill_contents(tensor.contents, arr)
    return message
