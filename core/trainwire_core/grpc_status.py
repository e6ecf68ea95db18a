"""Maps the trainwire error family to gRPC statuses (servers) and back (clients)."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from trainwire_core.errors import TrainwireError, error_for_code

logger = logging.getLogger(__name__)


def to_status(err: TrainwireError) -> grpc.Status:
    """Builds a rich gRPC status; a field error travels as google.rpc.BadRequest."""
    details = []
    if err.field:
        bad = error_details_pb2.BadRequest(
            field_violations=[error_details_pb2.BadRequest.FieldViolation(field=err.field, description=err.message)]
        )
        packed = any_pb2.Any()
        packed.Pack(bad)
        details.append(packed)
    code = err.code.value[0]
    return rpc_status.to_status(status_pb2.Status(code=code, message=err.message, details=details))


def _status_for(exc: BaseException, method: str) -> grpc.Status:
    if isinstance(exc, TrainwireError):
        return to_status(exc)
    # Anything else is a bug in trainwire: say so, keep the details in the log.
    logger.exception("unexpected error in %s", method)
    return rpc_status.to_status(
        status_pb2.Status(code=code_pb2.INTERNAL, message=f"internal error in {method}: {type(exc).__name__}: {exc}")
    )


async def _abort(context: grpc.aio.ServicerContext, status: grpc.Status) -> None:
    await context.abort(status.code, status.details, status.trailing_metadata)


def handle_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates an async servicer method (unary or streaming) to map errors to statuses."""
    name = method.__qualname__

    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream_wrapper(self, request, context):  # type: ignore[no-untyped-def]
            try:
                async for item in method(self, request, context):
                    yield item
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a status below
                await _abort(context, _status_for(exc, name))

        return stream_wrapper

    @functools.wraps(method)
    async def unary_wrapper(self, request, context):  # type: ignore[no-untyped-def]
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to a status below
            await _abort(context, _status_for(exc, name))

    return unary_wrapper


def from_rpc_error(err: grpc.RpcError) -> TrainwireError:
    """Turns a failed call into the matching TrainwireError, keeping the field."""
    field = ""
    status = rpc_status.from_call(err) if hasattr(err, "trailing_metadata") else None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                if bad.field_violations:
                    field = bad.field_violations[0].field
    return error_for_code(err.code(), err.details() or "", field)


def field_of(err: grpc.RpcError) -> str:
    """The bad field named in a failed call's details, or ""."""
    return from_rpc_error(err).field
