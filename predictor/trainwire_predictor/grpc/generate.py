"""Token generation over gRPC: a ModelInfer request with a ``text_input`` tensor, as Triton's LLM backends take it.

Inputs: ``text_input`` (BYTES, one element), optionally ``stream`` (BOOL) and
``sampling_parameters`` (BYTES, a JSON object); the request's parameters may
carry the same sampling fields (``max_tokens``, ``temperature``, ...). Through
ModelStreamInfer a streamed request is answered with one response per token
(``text_output``), the last one marked ``triton_final_response``; otherwise one
response holds the whole text. The call's deadline bounds the generation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from trainwire_core.auth import current_caller
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_predictor.generative.requests import (
    GenerateRequest,
    parameters_object,
    prompt_text,
    sampling_params,
    tenant_of,
)
from trainwire_predictor.generative.service import GenerationStream, TextGenerator
from trainwire_predictor.grpc.codec import request_from_proto
from trainwire_predictor.inference import decode_inputs

TEXT_INPUT, TEXT_OUTPUT = "text_input", "text_output"


def is_generate_request(request: pb.ModelInferRequest) -> bool:
    """Whether the request asks for generation (it names a ``text_input`` tensor)."""
    return any(tensor.name == TEXT_INPUT for tensor in request.inputs)


def _parameter(value: pb.InferParameter) -> Any:
    kind = value.WhichOneof("parameter_choice")
    return getattr(value, kind) if kind else None


def _element(arrays: dict[str, Any], name: str) -> Any:
    arr = arrays[name].reshape(-1)
    if arr.size != 1:
        raise InvalidArgumentError(f"input {name!r} must hold one element, not {arr.size}", field=f"inputs.{name}")
    value = arr[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def parse_generate(
    request: pb.ModelInferRequest, generator: TextGenerator, routing_key: str, time_remaining: float | None
) -> tuple[GenerateRequest, bool]:
    """The generation a request asks for, and whether it streams tokens.

    The parameters pass the same checks as REST's (``requests.sampling_params``), each error
    naming the field; the call's deadline caps ``timeout_s``.

    Raises:
        InvalidArgumentError: A bad input or parameter, naming it.
    """
    arrays = decode_inputs(request_from_proto(request, routing_key))
    fields = {k: _parameter(v) for k, v in request.parameters.items()}
    if "sampling_parameters" in arrays:
        name = "inputs.sampling_parameters"
        extra = parameters_object(_element(arrays, "sampling_parameters"), name)
        sampling_params(extra, generator.limits, f"{name}.")  # its errors name it
        fields.update(extra)
    stream = bool(_element(arrays, "stream")) if "stream" in arrays else True
    generate = GenerateRequest(
        model_name=request.model_name,
        model_version=request.model_version,
        prompt=prompt_text(_element(arrays, TEXT_INPUT), f"inputs.{TEXT_INPUT}"),
        params=sampling_params(fields, generator.limits, "parameters.", time_remaining_s=time_remaining),
        routing_key=routing_key or str(fields.get("routing_key") or ""),
        prompt_field=f"inputs.{TEXT_INPUT}",
        **tenant_of(current_caller()),
    )
    return generate, stream


def text_response(
    request: pb.ModelInferRequest, stream: GenerationStream, text: str, finish_reason: str | None
) -> pb.ModelInferResponse:
    """One answer: ``text_output`` as raw contents (BYTES, length-prefixed), as tritonclient reads it."""
    data = text.encode()
    params = {"triton_final_response": pb.InferParameter(bool_param=finish_reason is not None)}
    if finish_reason is not None:
        params["finish_reason"] = pb.InferParameter(string_param=finish_reason)
    return pb.ModelInferResponse(
        model_name=stream.model_name,
        model_version=stream.model_version,
        id=request.id,
        outputs=[pb.ModelInferResponse.InferOutputTensor(name=TEXT_OUTPUT, datatype="BYTES", shape=[1])],
        raw_output_contents=[len(data).to_bytes(4, "little") + data],
        parameters=params,
    )


async def generate_text(
    generator: TextGenerator, request: pb.ModelInferRequest, routing_key: str, time_remaining: float | None
) -> pb.ModelInferResponse:
    """A unary ModelInfer's answer: the whole text in one response (``stream`` is ignored)."""
    generate, _ = parse_generate(request, generator, routing_key, time_remaining)
    stream = await generator.open(generate)
    text = await stream.text()
    return text_response(request, stream, text, stream.finish_reason)


async def generate_responses(
    generator: TextGenerator, request: pb.ModelInferRequest, routing_key: str, time_remaining: float | None
) -> AsyncIterator[pb.ModelInferResponse]:
    """The answers to one generate request: a response per token when it streams, else one.

    Raises:
        TrainwireError: Before the first answer (a bad request, an unknown model); later
            failures end the iteration with the error.
    """
    generate, streamed = parse_generate(request, generator, routing_key, time_remaining)
    stream = await generator.open(generate)
    if not streamed:
        text = await stream.text()
        yield text_response(request, stream, text, stream.finish_reason)
        return
    async for event in stream:
        yield text_response(request, stream, event.text, event.finish_reason)
