"""Client-streaming uploads: one header, then chunks (datasets and checkpoints alike)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from trainwire_core.errors import InvalidArgumentError


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
