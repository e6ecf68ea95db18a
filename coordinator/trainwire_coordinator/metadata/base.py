"""The metadata store interface: runs, their event logs, idempotency keys and documents."""

from __future__ import annotations

import abc
import base64
import binascii
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class RunRecord:
    """One run as the metadata store keeps it.

    Attributes:
        run_id: Unique id of the run.
        name: The run's name (several runs may share one).
        state: A ``trainwire.v1.RunState`` value.
        created_at: Seconds since the epoch.
        updated_at: Seconds since the epoch.
        data: The serialized ``trainwire.v1.Run`` message.
        idempotency_key: The key the run was created with, or "".
    """

    run_id: str
    name: str
    state: int
    created_at: float
    updated_at: float
    data: bytes
    idempotency_key: str = ""


_MALFORMED = "page_token is malformed"


def encode_page_token(created_at: float, run_id: str) -> str:
    """Encodes a keyset position (the last run of a page) as an opaque token.

    Both metadata store backends use this format.
    """
    raw = f"{created_at!r}|{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_page_token(token: str) -> tuple[float, str]:
    """Decodes a token made by `encode_page_token`.

    Raises:
        ValueError: The token is malformed.
    """
    try:
        raw = base64.urlsafe_b64decode(token.encode("ascii")).decode()
        created, sep, run_id = raw.partition("|")
        created_at = float(created)
    except (ValueError, binascii.Error, UnicodeError):
        raise ValueError(_MALFORMED) from None
    if not sep or not run_id or not math.isfinite(created_at):
        raise ValueError(_MALFORMED)
    # urlsafe_b64decode skips stray characters; insist on the canonical form.
    if encode_page_token(created_at, run_id) != token:
        raise ValueError(_MALFORMED)
    return created_at, run_id


class MetadataStore(abc.ABC):
    """Stores runs and an append-only event log per run.

    Implementations are safe to call from several threads.
    """

    @abc.abstractmethod
    def create_run(self, record: RunRecord) -> RunRecord:
        """Inserts a new run, atomically honouring its idempotency key.

        Returns:
            The stored record: ``record`` itself, or the run created earlier
            with the same non-empty ``idempotency_key``.

        Raises:
            ValueError: Another run already has ``record.run_id``.
        """

    @abc.abstractmethod
    def update_run(self, record: RunRecord) -> None:
        """Replaces the stored run with the same ``run_id``.

        The stored ``idempotency_key`` is kept as created.

        Raises:
            KeyError: No run with that id.
        """

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord | None:
        """Returns the run with this id, or None."""

    @abc.abstractmethod
    def get_run_by_name(self, name: str) -> RunRecord | None:
        """Returns the newest run (by created_at, then run_id) with this name, or None."""

    def list_runs(
        self, states: Sequence[int] = (), page_size: int = 100, page_token: str = ""
    ) -> tuple[list[RunRecord], str]:
        """Lists runs newest first, optionally only those in ``states``.

        Runs with equal ``created_at`` are ordered by ``run_id``, descending.

        Args:
            states: Keep only runs in these states; empty keeps all.
            page_size: The most runs to return (>= 1).
            page_token: "" for the first page, else a token returned before.

        Returns:
            The page and the token of the next page ("" when there is none).

        Raises:
            ValueError: The page token is malformed, or ``page_size`` < 1.
        """
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        before = decode_page_token(page_token) if page_token else None
        wanted = frozenset(int(s) for s in states)
        found = self._newest_runs(wanted, before, page_size + 1)
        # A run may have changed state since a backend's index was read: it is left out, and
        # the next page still starts after it.
        page = [r for _, r in found[:page_size] if r is not None and (not wanted or r.state in wanted)]
        next_token = encode_page_token(*found[page_size - 1][0]) if len(found) > page_size else ""
        return page, next_token

    @abc.abstractmethod
    def _newest_runs(
        self, states: frozenset[int], before: tuple[float, str] | None, limit: int
    ) -> list[tuple[tuple[float, str], RunRecord | None]]:
        """Up to ``limit`` runs, newest first, each with its keyset position ``(created_at, run_id)``.

        Args:
            states: Only runs in these states (as the backend's index last saw them); empty: all.
            before: Only runs strictly before this position; None: from the newest.
            limit: The most runs to return.

        Returns:
            Positions with their records; a record is None when the run vanished since it was found.
        """

    @abc.abstractmethod
    def append_event(self, run_id: str, payload: bytes) -> int:
        """Appends an event to the run's log (whether the run exists is not checked).

        Returns:
            The event's id: 1 for a run's first event, then increasing by 1.
        """

    @abc.abstractmethod
    def read_events(self, run_id: str, after_event_id: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Returns up to ``limit`` events with id > ``after_event_id``, in order."""

    # Documents: small records of other kinds (searches), few enough to list whole.
    @abc.abstractmethod
    def put_document(self, kind: str, key: str, data: bytes) -> None:
        """Writes (creates or replaces) the document ``key`` of ``kind``."""

    @abc.abstractmethod
    def create_document(self, kind: str, key: str, data: bytes) -> bytes:
        """Writes the document unless one with that key exists; returns the stored one (atomic)."""

    @abc.abstractmethod
    def get_document(self, kind: str, key: str) -> bytes | None:
        """The document ``key`` of ``kind``, or None."""

    @abc.abstractmethod
    def list_documents(self, kind: str) -> list[bytes]:
        """Every document of ``kind``, in no particular order."""

    def close(self) -> None:
        """Releases connections."""
