"""GRPCInferenceService: protos in, ModelRepository and Predictor calls, protos out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, TrainwireError
from trainwire_core.grpc_status import handle_errors
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.inference import grpc_service_pb2_grpc as pb_grpc
from trainwire_predictor import __version__
from trainwire_predictor.batching import Batcher
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.statistics import Recorder, Recorders, Statistics, Timing, now_ns

logger = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """The Open Inference Protocol over the shared store's committed checkpoints.

    Args:
        models: Resolution and the loaded-model cache.
        batcher: Runs model compute off the event loop, batching concurrent requests where safe.
        stream_window: Requests of one stream scored at once (answers keep request order).
        statistics: What ModelStatistics answers from (default: a new, empty one).
        recorders: Also told of every request and model call (e.g. the Prometheus metrics).
    """

    def __init__(
        self,
        models: ModelRepository,
        batcher: Batcher,
        stream_window: int = 16,
        statistics: Statistics | None = None,
        recorders: list[Recorder] | None = None,
    ) -> None:
        self.models = models
        self.batcher = batcher
        self.stream_window = stream_window
        self.statistics = statistics if statistics is not None else Statistics()
        self.recorder = Recorders([self.statistics, *(recorders or [])])
        if batcher.recorder is None:
            batcher.recorder = self.recorder

    async def infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
        timing = Timing()
        # A request whose model is not found counts for no model (as in Triton).
        model = await self.models.get(request.model_name, request.model_version)
        try:
            response = await self.batcher.infer(request, model, timing)
        except Exception:
            self.recorder.failure(model.ref, now_ns() - timing.start_ns)
            raise
        self.recorder.success(model.ref, timing, now_ns() - timing.start_ns)
        return response

    @handle_errors
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @handle_errors
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    @handle_errors
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Context) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(
            name="trainwire-predictor",
            version=__version__,
            extensions=["model_repository", "model_stream_infer", "statistics"],
        )

    @handle_errors
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        try:
            await self.models.get(request.name, request.version)
        except (NotFoundError, FailedPreconditionError):
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    @handle_errors
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context) -> pb.ModelMetadataResponse:
        model = await self.models.get(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=request.name,
            versions=list(model.ref.versions),
            platform=model.platform,
            inputs=[tensor(name=s.name, datatype=s.datatype, shape=s.shape) for s in model.inputs],
            outputs=[tensor(name=s.name, datatype=s.datatype, shape=s.shape) for s in model.outputs],
        )

    @handle_errors
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> pb.ModelInferResponse:
        return await self.infer(request)

    @handle_errors
    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        # Score up to stream_window requests at once; answer in request order.
        pending: asyncio.Queue[asyncio.Task[pb.ModelStreamInferResponse] | None] = asyncio.Queue(self.stream_window)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    await pending.put(asyncio.create_task(self._stream_one(request)))
            finally:
                await pending.put(None)

        reader = asyncio.create_task(read())
        try:
            while (task := await pending.get()) is not None:
                yield await task
        finally:
            reader.cancel()
            while not pending.empty():
                if (task := pending.get_nowait()) is not None:
                    task.cancel()

    async def _stream_one(self, request: pb.ModelInferRequest) -> pb.ModelStreamInferResponse:
        """One stream message; a failure is answered in error_message and the stream goes on."""
        try:
            return pb.ModelStreamInferResponse(infer_response=await self.infer(request))
        except Exception as exc:  # noqa: BLE001 - reported in the message
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
                    model_name=request.model_name,
                    model_version=request.model_version,
                    id=request.id,
                    parameters=params,
                ),
            )

    @handle_errors
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Context) -> pb.ModelStatisticsResponse:
        if not request.name:
            if request.version:
                raise InvalidArgumentError("a version needs a model name", field="version")
            return pb.ModelStatisticsResponse(model_stats=self.statistics.snapshot())
        # The name (a run name or id) and version must exist; the model need not be loaded.
        ref = await self.models.resolve(request.name, request.version)
        stats = self.statistics.snapshot(ref.run_id, request.version and ref.checkpoint_id, request.name)
        if not stats:
            stats = [self.statistics.zero(ref, request.name)]
        return pb.ModelStatisticsResponse(model_stats=stats)

    @handle_errors
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Context) -> pb.RepositoryIndexResponse:
        entry = pb.RepositoryIndexResponse.ModelIndex
        models = [
            entry(
                name=ref.run_name or ref.run_id,
                version=ref.checkpoint_id,
                state="READY" if loaded else "UNAVAILABLE",
                reason="" if loaded else "not loaded",
            )
            for ref, loaded in await self.models.index()
            if loaded or not request.ready
        ]
        return pb.RepositoryIndexResponse(models=models)

    @handle_errors
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        version = request.parameters["version"].string_param if "version" in request.parameters else ""
        await self.models.get(request.model_name, version)
        return pb.RepositoryModelLoadResponse()

    @handle_errors
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        await self.models.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()
