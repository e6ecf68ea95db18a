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
from trainwire_predictor.shared_memory import BYTE_SIZE, OFFSET, REGION, SharedMemoryRef, region_ref


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
    An input or output with a ``shared_memory_region`` parameter lies in shared memory (Triton's
    system shared memory extension); raw contents then cover only the other inputs, in order.

    Raises:
        InvalidArgumentError: raw contents that do not match the inputs one to one, an input
            with both, typed contents in another datatype's field, or bad shared memory parameters.
    """
    inputs = request.inputs
    raw = request.raw_input_contents
    if len(raw) == len(inputs) == 1:
        # The common request (one raw input, not in shared memory): the checks below, without their lists.
        tensor = inputs[0]
        if not tensor.parameters and not tensor.HasField("contents"):
            outputs = request.outputs
            if not any(out.parameters for out in outputs):
                return InferenceRequest(
                    request.model_name,
                    request.model_version,
                    request.id,
                    [InputTensor(tensor.name, tensor.datatype, tensor.shape, raw[0], "raw_input_contents[0]")],
                    [out.name for out in outputs],
                    routing_key_of(request.parameters) or routing_key,
                )
    shared: list[SharedMemoryRef | None] = [
        region_ref(_plain(t.parameters), f"inputs[{i}].parameters") if t.parameters else None
        for i, t in enumerate(inputs)
    ]
    in_memory = len(inputs) - sum(ref is not None for ref in shared)
    if raw and len(raw) != in_memory:
        raise InvalidArgumentError(
            f"raw_input_contents has {len(raw)} entries for {in_memory} inputs; send one per input "
            "(but those in shared memory), in order",
            field="raw_input_contents",
        )
    tensors = []
    next_raw = 0
    for i, tensor in enumerate(inputs):
        ref = shared[i]
        if ref is not None:
            tensors.append(InputTensor(tensor.name, tensor.datatype, tensor.shape, ref, f"{ref.field}.{REGION}"))
        elif raw:
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"input {tensor.name!r} has typed contents while the request uses raw_input_contents; "
                    "send every input one way or the other",
                    field=f"inputs[{i}].contents",
                )
            field = f"raw_input_contents[{next_raw}]"
            tensors.append(InputTensor(tensor.name, tensor.datatype, tensor.shape, raw[next_raw], field))
            next_raw += 1
        else:
            field = f"inputs[{i}].contents"
            tensors.append(InputTensor(tensor.name, tensor.datatype, tensor.shape, _typed(tensor, field), field))
    regions = {
        out.name: ref
        for i, out in enumerate(request.outputs)
        if out.parameters and (ref := region_ref(_plain(out.parameters), f"outputs[{i}].parameters")) is not None
    }
    return InferenceRequest(
        request.model_name,
        request.model_version,
        request.id,
        tensors,
        [out.name for out in request.outputs],
        routing_key_of(request.parameters) or routing_key,
        regions or None,
        bool(regions) or in_memory < len(inputs),
    )


def _plain(parameters: Any) -> dict[str, Any]:
    """A parameters map as name -> its value (whichever of the oneof is set)."""
    plain = {}
    for key, param in parameters.items():
        kind = param.WhichOneof("parameter_choice")
        plain[key] = None if kind is None else getattr(param, kind)
    return plain


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
    """The ModelInferResponse: raw output contents when the request was raw, typed contents otherwise.

    An output written into shared memory carries its metadata and where it lies, and no data
    (an empty raw entry keeps the raw contents in output order, as tritonclient reads them).
    """
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    regions = response.output_regions
    for name, arr in response.outputs:
        tensor = message.outputs.add(name=name, datatype=datatype_name(arr.dtype), shape=arr.shape)
        ref = regions.get(name) if regions else None
        if ref is not None:
            tensor.parameters[REGION].string_param = ref.region
            tensor.parameters[BYTE_SIZE].int64_param = ref.byte_size
            if ref.offset:
                tensor.parameters[OFFSET].int64_param = ref.offset
            if raw:
                message.raw_output_contents.append(b"")
        elif raw:
            message.raw_output_contents.append(raw_bytes(arr))
        else:
            fill_contents(tensor.contents, arr)
    return message
