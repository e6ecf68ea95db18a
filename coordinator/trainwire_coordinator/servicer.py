"""Thin gRPC servicers: protos in, domain calls, protos out (blocking reads in threads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from trainwire_coordinator.run_manager import RunManager
from trainwire_core.auth import current_caller
from trainwire_core.grpc_status import handle_errors
from trainwire_core.v1 import coordinator_pb2, coordinator_pb2_grpc, worker_reports_pb2, worker_reports_pb2_grpc


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, runs: RunManager) -> None:
        self.runs = runs

    @handle_errors
    async def Fit(self, request: coordinator_pb2.FitRequest, context: grpc.aio.ServicerContext) -> coordinator_pb2.Run:
        return await self.runs.fit(request)

    @handle_errors
    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.runs.get_run, request.run_id)

    @handle_errors
    async def ListRuns(self, request, context):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.runs.list_runs, request)

    @handle_errors
    async def WatchRun(self, request, context) -> AsyncIterator[coordinator_pb2.RunEvent]:  # type: ignore[no-untyped-def]
        async for event in self.runs.watch(request):
            yield event

    @handle_errors
    async def WatchRunBatched(self, request, context) -> AsyncIterator[coordinator_pb2.RunEventBatch]:  # type: ignore[no-untyped-def]
        async for batch in self.runs.watch(request, batched=True):
            yield batch

    @handle_errors
    async def CancelRun(self, request, context):  # type: ignore[no-untyped-def]
        return await self.runs.cancel(request.run_id)

    @handle_errors
    async def GetCaller(self, request, context):  # type: ignore[no-untyped-def]
        caller = current_caller()
        return coordinator_pb2.CallerInfo(name=caller.name, scopes=sorted(caller.scopes))

    @handle_errors
    async def GetDataset(self, request, context):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.runs.datasets.get, request.sha256)

    @handle_errors
    async def UploadDataset(self, request_iterator, context):  # type: ignore[no-untyped-def]
        return await self.runs.datasets.upload(request_iterator)

    @handle_errors
    async def UploadCheckpoint(self, request_iterator, context):  # type: ignore[no-untyped-def]
        return await self.runs.upload_checkpoint(request_iterator)

    @handle_errors
    async def DownloadCheckpoint(self, request, context):  # type: ignore[no-untyped-def]
        async for chunk in self.runs.download_checkpoint(request.checkpoint):
            yield chunk

    @handle_errors
    async def WatchLogs(self, request, context) -> AsyncIterator[coordinator_pb2.LogLines]:  # type: ignore[no-untyped-def]
        async for batch in self.runs.watch_logs(request):
            yield batch

    @handle_errors
    async def GetPackage(self, request, context):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.runs.packages.get, request.sha256)

    @handle_errors
    async def UploadPackage(self, request_iterator, context):  # type: ignore[no-untyped-def]
        return await self.runs.packages.upload(request_iterator)


class WorkerReportsServicer(worker_reports_pb2_grpc.WorkerReportsServicer):
    """Receives every worker's report stream; each message is handled in order."""

    def __init__(self, runs: RunManager) -> None:
        self.runs = runs

    @handle_errors
    async def ReportStream(self, request_iterator, context):  # type: ignore[no-untyped-def]
        run_id = self.runs.authorize_reports(dict(context.invocation_metadata() or ()))
        count = 0
        async for report in request_iterator:
            await self.runs.on_worker_report(report, run_id)
            count += 1
        return worker_reports_pb2.ReportStreamAck(reports_received=count)
