"""Client-streaming uploads: one header, then chunks (datasets and checkpoints alike)."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from trainwire_core.errors import InvalidArgumentError, ResourceExhaustedError

SHA256 = re.compile(r"^[0-9a-f]{64}$")


async def read_upload(
    requests: AsyncIterator[Any], on_header: Callable[[Any], None], on_chunk: Callable[[Any], None]
) -> Any:
    """Reads a header-first upload, handing each part on as it arrives.

    Args:
        requests: Messages with a ``part`` oneof of ``header`` and ``chunk``.
        on_header: Checks the header (raises to refuse the upload).
        on_chunk: Takes one chunk (raises to refuse the upload).

    Returns:
        The header.

    Raises:
        InvalidArgumentError: No header, a header that is not first, or a second header (field ``header``).
    """
    header = None
    async for req in requests:
        part = req.WhichOneof("part")
        if header is None:
            if part != "header":
                raise InvalidArgumentError("the first message of an upload must be a header", field="header")
            header = req.header
            on_header(header)
        elif part != "chunk":
            raise InvalidArgumentError("only one header per upload", field="header")
        else:
            on_chunk(req.chunk)
    if header is None:
        raise InvalidArgumentError("empty upload: no header", field="header")
    return header


async def read_hashed_upload(requests: AsyncIterator[Any], max_bytes: int) -> tuple[Any, bytes]:
    """Reads a content-addressed upload: a header with ``sha256`` and ``size_bytes``, then chunks.

    Returns:
        The header and the content, which has exactly the size and hash the header gave.

    Raises:
        InvalidArgumentError: A bad header, or content of another size or hash (nothing is kept).
        ResourceExhaustedError: ``header.size_bytes`` over ``max_bytes``.
    """
    buf = io.BytesIO()
    digest = hashlib.sha256()
    limit = 0

    def check_header(header: Any) -> None:
        nonlocal limit
        if not SHA256.match(header.sha256):
            raise InvalidArgumentError("header.sha256 must be 64 lowercase hex digits", field="header.sha256")
        if header.size_bytes <= 0:
            raise InvalidArgumentError("header.size_bytes must be > 0", field="header.size_bytes")
        if header.size_bytes > max_bytes:
            raise ResourceExhaustedError(
                f"upload of {header.size_bytes} bytes is over the limit of {max_bytes}", field="header.size_bytes"
            )
        limit = header.size_bytes

    def take_chunk(chunk: bytes) -> None:
        if buf.tell() + len(chunk) > limit:
            raise InvalidArgumentError(f"upload is longer than header.size_bytes={limit}", field="chunk")
        buf.write(chunk)
        digest.update(chunk)

    header = await read_upload(requests, check_header, take_chunk)
    if buf.tell() != header.size_bytes:
        raise InvalidArgumentError(
            f"upload truncated: got {buf.tell()} of {header.size_bytes} bytes; nothing was stored", field="chunk"
        )
    if digest.hexdigest() != header.sha256:
        raise InvalidArgumentError(
            "upload content does not match header.sha256; nothing was stored", field="header.sha256"
        )
    return header, buf.getvalue()
