"""GRPCInferenceService: protos in, DataPlane calls, protos out (a front end that only converts)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from trainwire_core.errors import TrainwireError
from trainwire_core.grpc_status import handle_errors
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_predictor.batching import Batcher
from trainwire_predictor.dataplane import (
    EXTENSIONS,
    SERVER_NAME,
    DataPlane,
    ModelConfiguration,
    triton_data_type,
    triton_dims,
)
from trainwire_predictor.grpc.codec import request_from_proto, response_to_proto
from trainwire_predictor.grpc.generate import generate_responses, generate_text, is_generate_request
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.models import TensorSpec
from trainwire_predictor.shared_memory import cuda_unimplemented
from trainwire_predictor.statistics import Recorder, Statistics

logger = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext
# Answers of raw requests carry raw contents (what tritonclient expects), others typed contents.
_RAW = functools.partial(response_to_proto, raw=True)
_TYPED = functools.partial(response_to_proto, raw=False)


def _routing_key(context: Context) -> str:
    """The call's ``routing-key`` metadata ("" when absent): sticky routing for callers that cannot set parameters."""
    for key, value in context.invocation_metadata() or ():
        if key == "routing-key":
            return value if isinstance(value, str) else value.decode("latin-1")
    return ""


def _stream_error(request: pb.ModelInferRequest, exc: Exception) -> pb.ModelStreamInferResponse:
    """A failed stream request's answer: the message, with its status code and field as parameters."""
    if isinstance(exc, TrainwireError):
        code, message, field = exc.code, exc.message, exc.field
    else:
        logger.exception("unexpected error in ModelStreamInfer")
        code, message, field = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}", ""
    params = {"error_code": pb.InferParameter(string_param=code.name)}
    if field:
        params["error_field"] = pb.InferParameter(string_param=field)
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id, parameters=params
        ),
    )


def _tensor_fields(spec: TensorSpec) -> dict[str, Any]:
    dims, reshape = triton_dims(spec.shape)
    fields: dict[str, Any] = {"name": spec.name, "data_type": pb.DataType.Value(triton_data_type(spec.datatype))}
    fields["dims"] = dims
    if reshape is not None:
        fields["reshape"] = pb.ModelTensorReshape(shape=reshape)
    return fields


def config_proto(config: ModelConfiguration) -> pb.ModelConfig:
    """Triton's ModelConfig message of a model version's configuration."""
    batching = config.dynamic_batching
    return pb.ModelConfig(
        name=config.name,
        platform=config.platform,
        backend=config.backend,
        version_policy=pb.ModelVersionPolicy(all=pb.ModelVersionPolicy.All()),
        max_batch_size=config.max_batch_size,
        input=[pb.ModelInput(**_tensor_fields(s)) for s in config.inputs],
        output=[pb.ModelOutput(**_tensor_fields(s)) for s in config.outputs],
        dynamic_batching=(
            pb.ModelDynamicBatching(
                preferred_batch_size=batching.preferred_batch_sizes,
                max_queue_delay_microseconds=batching.max_queue_delay_us,
            )
            if batching is not None
            else None
        ),
        instance_group=[
            pb.ModelInstanceGroup(name=config.name, count=config.instances, kind=pb.ModelInstanceGroup.KIND_CPU)
        ],
        parameters={"version": pb.ModelParameter(string_value=config.version)},
        model_transaction_policy=pb.ModelTransactionPolicy(decoupled=config.decoupled),
    )


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """The Open Inference Protocol over gRPC, on the data plane.

    Args:
        models: Resolution and the loaded-model cache (when no ``dataplane`` is given).
        batcher: Runs model compute off the event loop (when no ``dataplane`` is given).
        stream_window: Requests of one stream scored at once (answers keep request order).
        statistics: What ModelStatistics answers from (default: a new, empty one).
        recorders: Also told of every request and model call (e.g. the Prometheus metrics).
        dataplane: The data plane to serve (shared with the REST front end); built from the above when None.
    """

    def __init__(
        self,
        models: ModelRepository | None = None,
        batcher: Batcher | None = None,
        stream_window: int = 16,
        statistics: Statistics | None = None,
        recorders: list[Recorder] | None = None,
        dataplane: DataPlane | None = None,
    ) -> None:
        if dataplane is None:
            if models is None or batcher is None:
                raise ValueError("InferenceServicer needs a dataplane, or models and a batcher")
            dataplane = DataPlane(models, batcher, statistics, recorders)
        self.dataplane = dataplane
        self.stream_window = stream_window

    @property
    def statistics(self) -> Statistics:
        return self.dataplane.statistics

    async def infer(self, request: pb.ModelInferRequest, routing_key: str = "") -> pb.ModelInferResponse:
        parsed = request_from_proto(request, routing_key)
        # Raw whenever Triton would be: its C++ client (perf_analyzer's) reads every output's
        # raw_output_contents entry by index, also where the tensors lie in shared memory.
        encode = _RAW if request.raw_input_contents or parsed.shared_memory else _TYPED
        return await self.dataplane.infer(parsed, encode)

    @handle_errors
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @handle_errors
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    @handle_errors
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Context) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(
            name=SERVER_NAME, version=self.dataplane.version, extensions=[*EXTENSIONS, "model_stream_infer"]
        )

    @handle_errors
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self.dataplane.model_ready(request.name, request.version))

    @handle_errors
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context) -> pb.ModelMetadataResponse:
        meta = await self.dataplane.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=list(meta.versions),
            platform=meta.platform,
            inputs=[tensor(name=s.name, datatype=s.datatype, shape=s.shape) for s in meta.inputs],
            outputs=[tensor(name=s.name, datatype=s.datatype, shape=s.shape) for s in meta.outputs],
        )

    @handle_errors
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        if is_generate_request(request):
            return await generate_text(
                self.dataplane.generator, request, _routing_key(context), context.time_remaining()
            )
        return await self.infer(request, _routing_key(context))

    @handle_errors
    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        # Up to stream_window requests are answered at once, each into its own queue; the queues
        # are sent in request order (a generate request's tokens, then the next request's answers).
        Answers = asyncio.Queue[pb.ModelStreamInferResponse | None]
        pending: asyncio.Queue[tuple[asyncio.Task[None], Answers] | None] = asyncio.Queue(self.stream_window)
        routing_key = _routing_key(context)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    answers: Answers = asyncio.Queue()
                    task = asyncio.create_task(self._stream_one(request, routing_key, context, answers))
                    await pending.put((task, answers))
            finally:
                await pending.put(None)

        reader = asyncio.create_task(read())
        answering: asyncio.Task[None] | None = None
        try:
            while (item := await pending.get()) is not None:
                answering, answers = item
                while (answer := await answers.get()) is not None:
                    yield answer
        finally:
            # A cancelled or broken stream ends every request it started: the one being answered
            # (its generation leaves the batch at the next decode step) and those still queued.
            reader.cancel()
            if answering is not None:
                answering.cancel()
            while not pending.empty():
                if (item := pending.get_nowait()) is not None:
                    item[0].cancel()

    async def _stream_one(
        self,
        request: pb.ModelInferRequest,
        routing_key: str,
        context: Context,
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None],
    ) -> None:
        """One stream request's answers; a failure is answered in error_message and the stream goes on."""
        try:
            if is_generate_request(request):
                async for response in generate_responses(
                    self.dataplane.generator, request, routing_key, context.time_remaining()
                ):
                    answers.put_nowait(pb.ModelStreamInferResponse(infer_response=response))
            else:
                answers.put_nowait(pb.ModelStreamInferResponse(infer_response=await self.infer(request, routing_key)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported in the message
            answers.put_nowait(_stream_error(request, exc))
        finally:
            answers.put_nowait(None)

    @handle_errors
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        config = await self.dataplane.model_config(request.name, request.version)
        return pb.ModelConfigResponse(config=config_proto(config))

    @handle_errors
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Context) -> pb.ModelStatisticsResponse:
        stats = await self.dataplane.model_statistics(request.name, request.version)
        return pb.ModelStatisticsResponse(model_stats=[m.proto() for m in stats])

    @handle_errors
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Context) -> pb.RepositoryIndexResponse:
        entry = pb.RepositoryIndexResponse.ModelIndex
        index = await self.dataplane.repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[entry(name=e.name, version=e.version, state=e.state, reason=e.reason) for e in index]
        )

    @handle_errors
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        version = request.parameters["version"].string_param if "version" in request.parameters else ""
        await self.dataplane.load(request.model_name, version)
        return pb.RepositoryModelLoadResponse()

    @handle_errors
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        # As for loading, Triton's parameters carry the version ("" or absent: every version).
        version = request.parameters["version"].string_param if "version" in request.parameters else ""
        await self.dataplane.unload(request.model_name, version)
        return pb.RepositoryModelUnloadResponse()

    # --- Triton's system shared memory extension (CUDA's answers UNIMPLEMENTED) ----------
    @handle_errors
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        status = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(
            regions={
                r.name: status(name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size)
                for r in self.dataplane.shared_memory.status(request.name)
            }
        )

    @handle_errors
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self.dataplane.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @handle_errors
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        self.dataplane.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @handle_errors
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        raise cuda_unimplemented()

    @handle_errors
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        raise cuda_unimplemented()

    @handle_errors
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        # No CUDA region can be registered, so none is left to drop: clients that unregister every
        # region as they finish (perf_analyzer) succeed, as against Triton without GPUs.
        return pb.CudaSharedMemoryUnregisterResponse()
