"""The metadata store interface: runs, their event logs and idempotency keys."""

from __future__ import annotations

import abc
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

    @abc.abstractmethod
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

    @abc.abstractmethod
    def append_event(self, run_id: str, payload: bytes) -> int:
        """Appends an event to the run's log (whether the run exists is not checked).

        Returns:
            The event's id: 1 for a run's first event, then increasing by 1.
        """

    @abc.abstractmethod
    def read_events(self, run_id: str, after_event_id: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Returns up to ``limit`` events with id > ``after_event_id``, in order."""

    def close(self) -> None:
        """Releases connections."""
