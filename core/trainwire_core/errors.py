"""The one error family of trainwire, each error carrying its gRPC status code.

Servicers raise these; ``trainwire.grpc_status`` maps them to gRPC statuses in
one place, and the clients turn statuses back into these errors.
"""

from __future__ import annotations

import grpc

# UTF-8 bytes; the status's grpc-message percent-encodes (x3) and its details base64 the message (x4/3).
MAX_MESSAGE_BYTES = 1024
MAX_FIELD_BYTES = 256


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, marked "..." where it was cut."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


class TrainwireError(Exception):
    """Base of every error trainwire reports to a caller.

    Args:
        message: What went wrong and, where possible, what to change.
        field: The request field at fault (e.g. ``scaling_config.num_workers``).
    """

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, field: str = "") -> None:
        # Messages quote the caller's input; the status (message twice, field once) must stay well
        # inside gRPC's 8 KiB metadata limit or the caller gets RESOURCE_EXHAUSTED instead of it.
        message = _clip(message, MAX_MESSAGE_BYTES)
        field = _clip(field, MAX_FIELD_BYTES)
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(TrainwireError, ValueError):
    """Bad input; ``field`` names it."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(TrainwireError, LookupError):
    """A run, checkpoint, dataset or model that does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(TrainwireError):
    """Something that must be unique exists already."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(TrainwireError):
    """The request is valid but the system is not in a state to do it."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(TrainwireError):
    """Too large, or more than the cluster can ever give."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnauthenticatedError(TrainwireError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(TrainwireError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnavailableError(TrainwireError):
    """A transient failure: retry later."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(TrainwireError):
    """Stored data is corrupt: e.g. a checkpoint file that does not match its manifest."""

    code = grpc.StatusCode.DATA_LOSS


class FrameworkNotInstalledError(FailedPreconditionError):
    """A framework package is missing where it is needed."""

    def __init__(self, framework: str, package: str, install: str = "") -> None:
        super().__init__(
            f"{framework} support needs the '{package}' package, which is not installed here; "
            f"install it with: {install or f'pip install {package}'}"
        )


class TrainingFailedError(RuntimeError):
    """Raised by ``Trainer.fit()`` when the run ends FAILED; ``result`` holds the details."""

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


_BY_CODE: dict[grpc.StatusCode, type[TrainwireError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        ResourceExhaustedError,
        UnauthenticatedError,
        PermissionDeniedError,
        UnavailableError,
        DataLossError,
    )
}


def error_for_code(code: grpc.StatusCode, message: str, field: str = "") -> TrainwireError:
    """Builds the error class that stands for a gRPC status code."""
    cls = _BY_CODE.get(code, TrainwireError)
    err = cls(message, field=field)
    if cls is TrainwireError:
        err.code = code
    return err
