"""Metadata stores for runs and their event logs, chosen by URL."""

from __future__ import annotations

import os

from .base import MetadataStore, RunRecord

__all__ = ["MetadataStore", "RunRecord", "open_metadata_store"]

_ACCEPTED = "redis://..., rediss://..., sqlite:///abs/path.db, sqlite://:memory: or a bare filesystem path"


def open_metadata_store(url: str) -> MetadataStore:
    """Opens the metadata store that ``url`` names.

    Args:
        url: ``redis://...`` or ``rediss://...`` for Redis;
            ``sqlite:///abs/path.db``, ``sqlite://:memory:`` or a bare
            filesystem path for SQLite (parent directories are created).

    Raises:
        ValueError: The URL has none of the accepted forms.
    """
    if url.startswith(("redis://", "rediss://")):
        # Imported here so that SQLite users need not install redis.
        from .redis_store import RedisMetadataStore

        return RedisMetadataStore(url)

    from .sqlite_store import SQLiteMetadataStore

    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        if path != ":memory:" and not path.startswith("/"):
            raise ValueError(f"unsupported metadata store URL {url!r}; expected {_ACCEPTED}")
    elif "://" in url or not url.strip():
        raise ValueError(f"unsupported metadata store URL {url!r}; expected {_ACCEPTED}")
    else:
        path = url
    if path != ":memory:":
        path = os.path.abspath(os.path.expanduser(path))
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return SQLiteMetadataStore(path)
