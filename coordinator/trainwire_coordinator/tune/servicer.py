"""The Tuner service: thin, protos in and out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from trainwire_coordinator.tune.manager import TuneManager
from trainwire_core.grpc_status import handle_errors
from trainwire_core.v1 import tune_pb2, tune_pb2_grpc


class TunerServicer(tune_pb2_grpc.TunerServicer):
    def __init__(self, tunes: TuneManager) -> None:
        self.tunes = tunes

    @handle_errors
    async def Tune(self, request, context):  # type: ignore[no-untyped-def]
        return await self.tunes.tune(request)

    @handle_errors
    async def GetTune(self, request, context):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.tunes.get_tune, request.tune_id)

    @handle_errors
    async def ListTunes(self, request, context):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(self.tunes.list_tunes, request)

    @handle_errors
    async def WatchTune(self, request, context) -> AsyncIterator[tune_pb2.TuneRun]:  # type: ignore[no-untyped-def]
        async for tune in self.tunes.watch(request.tune_id):
            yield tune

    @handle_errors
    async def CancelTune(self, request, context):  # type: ignore[no-untyped-def]
        return await self.tunes.cancel(request.tune_id)

    @handle_errors
    async def ResumeTune(self, request, context):  # type: ignore[no-untyped-def]
        return await self.tunes.resume(request)
