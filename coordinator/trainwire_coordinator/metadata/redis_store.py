"""A metadata store in Redis.

Keys, all under ``<prefix>:``:

* ``run:<run_id>``: hash with the run's fields.
* ``idx:all``, ``idx:state:<state>``, ``idx:name:<name>``: sorted sets whose
  members are ``<created_at as 16 sortable hex digits><run_id>``, all with
  score 0, so that lexicographic order is (created_at, run_id) order and
  pages can be cut exactly with ``ZREVRANGEBYLEX``.
* ``idem:<idempotency_key>``: the run_id created with that key (``SET NX``).
* ``events:<run_id>``: a stream whose entry ids are ``<event_id>-0``.
* ``evseq:<run_id>``: the last event id handed out for the run.
* ``docs:<kind>``: a hash of the documents of that kind, by key.
"""

from __future__ import annotations

import struct

import redis

from .base import MetadataStore, RunRecord

_SIGN = 1 << 63
_MASK = (1 << 64) - 1

# INCR and XADD must be one atomic step, or concurrent appends could add
# stream ids out of order (which XADD rejects).
_APPEND_EVENT = """
local n = redis.call('INCR', KEYS[1])
redis.call('XADD', KEYS[2], string.format('%d-0', n), 'p', ARGV[1])
return n
"""


def _sort_key(created_at: float) -> str:
    """Maps a float to 16 hex digits whose string order is the float's order."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", created_at + 0.0))
    bits = (bits ^ _MASK) if bits & _SIGN else (bits | _SIGN)
    return f"{bits:016x}"


def _from_sort_key(key: str) -> float:
    bits = int(key, 16)
    bits = (bits & ~_SIGN) if bits & _SIGN else (bits ^ _MASK)
    (value,) = struct.unpack(">d", struct.pack(">Q", bits))
    return value


def _member(created_at: float, run_id: str) -> str:
    return _sort_key(created_at) + run_id


def _run_id_of(member: bytes) -> str:
    return member.decode()[16:]


class RedisMetadataStore(MetadataStore):
    """Keeps runs and events in Redis under the key prefix ``prefix``.

    Needs Redis >= 5 (streams). Multi-key changes run as WATCH/MULTI
    transactions, so several coordinators may share one Redis.
    """

    def __init__(self, url: str, prefix: str = "trainwire") -> None:
        """Connects lazily to the Redis at ``url`` (``redis://`` or ``rediss://``)."""
        self._redis = redis.Redis.from_url(url)
        self._prefix = prefix
        self._append_event = self._redis.register_script(_APPEND_EVENT)

    def _key(self, *parts: object) -> str:
        return ":".join([self._prefix, *(str(p) for p in parts)])

    def _index_keys(self, state: int, name: str) -> tuple[str, str, str]:
        return self._key("idx", "all"), self._key("idx", "state", int(state)), self._key("idx", "name", name)

    def create_run(self, record: RunRecord) -> RunRecord:
        """Inserts a new run, atomically honouring its idempotency key.

        Raises:
            ValueError: Another run already has ``record.run_id``.
        """
        run_key = self._key("run", record.run_id)
        idem_key = self._key("idem", record.idempotency_key) if record.idempotency_key else ""
        member = _member(record.created_at, record.run_id)

        def create(pipe: redis.client.Pipeline) -> str | None:
            if idem_key:
                existing = pipe.get(idem_key)
                if existing is not None:
                    return existing.decode()
            if pipe.exists(run_key):
                raise ValueError(f"run {record.run_id!r} already exists")
            pipe.multi()
            if idem_key:
                pipe.set(idem_key, record.run_id, nx=True)
            pipe.hset(run_key, mapping=self._fields(record, record.idempotency_key))
            for index in self._index_keys(record.state, record.name):
                pipe.zadd(index, {member: 0})
            return None

        watches = [run_key, idem_key] if idem_key else [run_key]
        existing_id = self._redis.transaction(create, *watches, value_from_callable=True)
        if existing_id is None:
            return record
        existing = self.get_run(existing_id)
        if existing is None:
            raise RuntimeError(f"idempotency key {record.idempotency_key!r} maps to missing run {existing_id!r}")
        return existing

    def update_run(self, record: RunRecord) -> None:
        """Replaces the stored run; its idempotency key stays as created.

        Raises:
            KeyError: No run with that id.
        """
        run_key = self._key("run", record.run_id)
        new_member = _member(record.created_at, record.run_id)

        def update(pipe: redis.client.Pipeline) -> None:
            name, state, created_at, idempotency_key = pipe.hmget(
                run_key, ["name", "state", "created_at", "idempotency_key"]
            )
            if name is None:
                raise KeyError(record.run_id)
            old_member = _member(float(created_at), record.run_id)
            pipe.multi()
            for index in self._index_keys(int(state), name.decode()):
                pipe.zrem(index, old_member)
            for index in self._index_keys(record.state, record.name):
                pipe.zadd(index, {new_member: 0})
            pipe.hset(run_key, mapping=self._fields(record, idempotency_key.decode()))

        self._redis.transaction(update, run_key)

    @staticmethod
    def _fields(record: RunRecord, idempotency_key: str) -> dict[str, str | bytes]:
        return {
            "name": record.name,
            "state": str(int(record.state)),
            "created_at": repr(float(record.created_at)),
            "updated_at": repr(float(record.updated_at)),
            "data": bytes(record.data),
            "idempotency_key": idempotency_key,
        }

    @staticmethod
    def _to_record(run_id: str, fields: dict[bytes, bytes]) -> RunRecord | None:
        if not fields:
            return None
        return RunRecord(
            run_id=run_id,
            name=fields[b"name"].decode(),
            state=int(fields[b"state"]),
            created_at=float(fields[b"created_at"]),
            updated_at=float(fields[b"updated_at"]),
            data=fields[b"data"],
            idempotency_key=fields[b"idempotency_key"].decode(),
        )

    def get_run(self, run_id: str) -> RunRecord | None:
        """Returns the run with this id, or None."""
        return self._to_record(run_id, self._redis.hgetall(self._key("run", run_id)))

    def get_run_by_name(self, name: str) -> RunRecord | None:
        """Returns the newest run (by created_at, then run_id) with this name, or None."""
        newest = self._redis.zrange(self._key("idx", "name", name), -1, -1)
        return self.get_run(_run_id_of(newest[0])) if newest else None

    def _newest_runs(
        self, states: frozenset[int], before: tuple[float, str] | None, limit: int
    ) -> list[tuple[tuple[float, str], RunRecord | None]]:
        upper = "(" + _member(*before) if before is not None else "+"
        indexes = [self._key("idx", "state", s) for s in sorted(states)] or [self._key("idx", "all")]
        # The newest ``limit`` runs overall are among the newest ``limit`` of each state's index.
        with self._redis.pipeline(transaction=False) as pipe:
            for index in indexes:
                pipe.zrevrangebylex(index, upper, "-", start=0, num=limit)
            members = sorted({m for found in pipe.execute() for m in found}, reverse=True)[:limit]
        with self._redis.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.hgetall(self._key("run", _run_id_of(member)))
            all_fields = pipe.execute()
        found = []
        for member, fields in zip(members, all_fields, strict=True):
            key = member.decode()
            found.append(((_from_sort_key(key[:16]), key[16:]), self._to_record(_run_id_of(member), fields)))
        return found

    def append_event(self, run_id: str, payload: bytes) -> int:
        """Appends an event to the run's log (the run's existence is not checked).

        Returns:
            The event's id: 1 for a run's first event, then increasing by 1.
        """
        keys = [self._key("evseq", run_id), self._key("events", run_id)]
        return int(self._append_event(keys=keys, args=[bytes(payload)]))

    def read_events(self, run_id: str, after_event_id: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        """Returns up to ``limit`` events with id > ``after_event_id``, in order."""
        if limit < 1:
            return []
        start = f"{max(int(after_event_id), 0) + 1}-0"
        entries = self._redis.xrange(self._key("events", run_id), min=start, max="+", count=int(limit))
        return [(int(entry_id.split(b"-", 1)[0]), fields[b"p"]) for entry_id, fields in entries]

    def put_document(self, kind: str, key: str, data: bytes) -> None:
        self._redis.hset(self._key("docs", kind), key, bytes(data))

    def create_document(self, kind: str, key: str, data: bytes) -> bytes:
        docs = self._key("docs", kind)
        with self._redis.pipeline() as pipe:  # one MULTI: HSETNX then HGET see no other write between
            pipe.hsetnx(docs, key, bytes(data))
            pipe.hget(docs, key)
            _, stored = pipe.execute()
        return bytes(stored)

    def get_document(self, kind: str, key: str) -> bytes | None:
        data = self._redis.hget(self._key("docs", kind), key)
        return bytes(data) if data is not None else None

    def list_documents(self, kind: str) -> list[bytes]:
        return [bytes(v) for v in self._redis.hvals(self._key("docs", kind))]

    def close(self) -> None:
        """Closes the connection pool."""
        self._redis.close()
