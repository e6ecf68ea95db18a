"""A metadata store in a SQLite database file (or in memory)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence

from .base import MetadataStore, RunRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    data BLOB NOT NULL,
    idempotency_key TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency_key
    ON runs (idempotency_key) WHERE idempotency_key != '';
CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at, run_id);
CREATE INDEX IF NOT EXISTS runs_name ON runs (name, created_at, run_id);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state, created_at, run_id);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (run_id, event_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS documents (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
"""

_COLUMNS = "run_id, name, state, created_at, updated_at, data, idempotency_key"


def _to_record(row: tuple) -> RunRecord:
    run_id, name, state, created_at, updated_at, data, idempotency_key = row
    return RunRecord(
        run_id=run_id,
        name=name,
        state=int(state),
        created_at=float(created_at),
        updated_at=float(updated_at),
        data=bytes(data),
        idempotency_key=idempotency_key,
    )


class SQLiteMetadataStore(MetadataStore):
    """Keeps runs and events in SQLite; ``path`` may be ":memory:".

    One connection is shared by all threads, serialized by a lock. Writes run
    in ``BEGIN IMMEDIATE`` transactions so that several processes may share a
    database file.
    """

    def __init__(self, path: str) -> None:
        """Opens (creating if needed) the database at ``path``."""
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def create_run(self, record: RunRecord) -> RunRecord:
        """Inserts a new run, atomically honouring its idempotency key.

        Raises:
            ValueError: Another run already has ``record.run_id``.
        """
        with self._transaction() as conn:
            if record.idempotency_key:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM runs WHERE idempotency_key = ? AND idempotency_key != ''",
                    (record.idempotency_key,),
                ).fetchone()
                if row is not None:
                    return _to_record(row)
            try:
                conn.execute(
                    f"INSERT INTO runs ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.run_id,
                        record.name,
                        int(record.state),
                        float(record.created_at),
                        float(record.updated_at),
                        bytes(record.data),
                        record.idempotency_key,
                    ),
                )
            except sqlite3.IntegrityError as e:
                raise ValueError(f"run {record.run_id!r} already exists") from e
        return record

    def update_run(self, record: RunRecord) -> None:
        """Replaces the stored run; its idempotency key stays as created.

        Raises:
            KeyError: No run with that id.
        """
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE runs SET name = ?, state = ?, created_at = ?, updated_at = ?, data = ? WHERE run_id = ?",
                (
                    record.name,
                    int(record.state),
                    float(record.created_at),
                    float(record.updated_at),
                    bytes(record.data),
                    record.run_id,
                ),
            )
            if cursor.rowcount == 0:
                raise KeyError(record.run_id)

    def get_run(self, run_id: str) -> RunRecord | None:
        """Returns the run with this id, or None."""
        rows = self._query(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        return _to_record(rows[0]) if rows else None

    def get_run_by_name(self, name: str) -> RunRecord | None:
        """Returns the newest run (by created_at, then run_id) with this name, or None."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM runs WHERE name = ? ORDER BY created_at DESC, run_id DESC LIMIT 1",
            (name,),
        )
        return _to_record(rows[0]) if rows else None

    def _newest_runs(
        self, states: frozenset[int], before: tuple[float, str] | None, limit: int
    ) -> list[tuple[tuple[float, str], RunRecord | None]]:
        clauses: list[str] = []
        params: list[object] = []
        if states:
            clauses.append(f"state IN ({', '.join('?' * len(states))})")
            params.extend(sorted(states))
        if before is not None:
            clauses.append("(created_at, run_id) < (?, ?)")
            params.extend(before)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        params.append(limit)
        rows = self._query(f"SELECT {_COLUMNS} FROM runs {where} ORDER BY created_at DESC, run_id DESC LIMIT ?", params)
        records = [_to_record(row) for row in rows]
        return [((r.created_at, r.run_id), r) for r in records]

    def append_event(self, run_id: str, payload: bytes) -> int:
        """Appends an event to the run's log (the run's existence is not checked).

        Returns:
            The event's id: 1 for a run's first event, then increasing by 1.
        """
        with self._transaction() as conn:
            (event_id,) = conn.execute(
                "SELECT COALESCE(MAX(event_id), 0) + 1 FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
            conn.execute(
                "INSERT INTO events (run_id, event_id, payload) VALUES (?, ?, ?)",
                (run_id, event_id, bytes(payload)),
            )
        return int(event_id)

    def read_events(self, run_id: str, after_event_id: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Returns up to ``limit`` events with id > ``after_event_id``, in order."""
        if limit < 1:
            return []
        rows = self._query(
            "SELECT event_id, payload FROM events WHERE run_id = ? AND event_id > ? ORDER BY event_id LIMIT ?",
            (run_id, int(after_event_id), int(limit)),
        )
        return [(int(event_id), bytes(payload)) for event_id, payload in rows]

    def put_document(self, kind: str, key: str, data: bytes) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO documents (kind, key, data) VALUES (?, ?, ?)", (kind, key, bytes(data))
            )

    def create_document(self, kind: str, key: str, data: bytes) -> bytes:
        with self._transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO documents (kind, key, data) VALUES (?, ?, ?)", (kind, key, bytes(data)))
            (stored,) = conn.execute("SELECT data FROM documents WHERE kind = ? AND key = ?", (kind, key)).fetchone()
        return bytes(stored)

    def get_document(self, kind: str, key: str) -> bytes | None:
        rows = self._query("SELECT data FROM documents WHERE kind = ? AND key = ?", (kind, key))
        return bytes(rows[0][0]) if rows else None

    def list_documents(self, kind: str) -> list[bytes]:
        return [bytes(data) for (data,) in self._query("SELECT data FROM documents WHERE kind = ?", (kind,))]

    def close(self) -> None:
        """Closes the database connection."""
        with self._lock:
            self._conn.close()
