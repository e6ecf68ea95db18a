"""Contract tests for the metadata stores, run against SQLite and a real redis-server."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainwire_coordinator.metadata import MetadataStore, RunRecord, open_metadata_store
from trainwire_coordinator.metadata.redis_store import RedisMetadataStore
from trainwire_coordinator.metadata.sqlite_store import SQLiteMetadataStore

pytestmark = pytest.mark.timeout(30)

PENDING, RUNNING, SUCCEEDED, FAILED = 1, 2, 3, 4


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    if request.param == "sqlite":
        s: MetadataStore = SQLiteMetadataStore(str(tmp_path / "metadata.db"))
    else:
        url = request.getfixturevalue("redis_url")
        s = RedisMetadataStore(url, prefix=f"test-{uuid.uuid4().hex}")
    yield s
    s.close()


def _run(
    run_id: str,
    *,
    name: str = "run",
    state: int = PENDING,
    created_at: float = 1000.0,
    data: bytes = b"",
    key: str = "",
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        name=name,
        state=state,
        created_at=created_at,
        updated_at=created_at,
        data=data or run_id.encode(),
        idempotency_key=key,
    )


def _all_pages(store: MetadataStore, page_size: int, states: tuple[int, ...] = ()) -> tuple[list[str], int]:
    ids: list[str] = []
    token = ""
    pages = 0
    while True:
        page, token = store.list_runs(states=states, page_size=page_size, page_token=token)
        pages += 1
        assert len(page) <= page_size
        ids.extend(r.run_id for r in page)
        if not token:
            return ids, pages
        assert pages < 100, "paging does not terminate"


def test_create_and_get(store: MetadataStore) -> None:
    record = _run("r1", name="träin:run|1", state=RUNNING, created_at=1234.5, data=b"\x00\xff\x00binary")
    assert store.create_run(record) == record
    assert store.get_run("r1") == record


def test_get_missing_returns_none(store: MetadataStore) -> None:
    assert store.get_run("nope") is None
    assert store.get_run_by_name("nope") is None


def test_create_duplicate_run_id_raises(store: MetadataStore) -> None:
    store.create_run(_run("r1"))
    with pytest.raises(ValueError):
        store.create_run(_run("r1", name="other"))
    assert store.get_run("r1") == _run("r1")


def test_idempotency_key_returns_first_run(store: MetadataStore) -> None:
    first = store.create_run(_run("r1", key="k", data=b"first"))
    again = store.create_run(_run("r2", key="k", data=b"second"))
    assert again == first
    assert store.get_run("r2") is None
    other = store.create_run(_run("r3", key="other-key"))
    assert other.run_id == "r3"


def test_empty_idempotency_key_never_dedupes(store: MetadataStore) -> None:
    store.create_run(_run("r1"))
    store.create_run(_run("r2"))
    assert store.get_run("r1") is not None
    assert store.get_run("r2") is not None


def test_idempotency_key_concurrent_create(store: MetadataStore) -> None:
    barrier = threading.Barrier(8)
    results: list[RunRecord] = []
    errors: list[Exception] = []

    def create(i: int) -> None:
        try:
            barrier.wait()
            results.append(store.create_run(_run(f"r{i}", created_at=1000.0 + i, key="same")))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors
    assert len(results) == 8
    assert len({r.run_id for r in results}) == 1
    runs, token = store.list_runs()
    assert token == ""
    assert [r.run_id for r in runs] == [results[0].run_id]


def test_update_run_replaces(store: MetadataStore) -> None:
    store.create_run(_run("r1", name="a", state=PENDING, created_at=10.0, key="k"))
    store.create_run(_run("r2", name="a", state=PENDING, created_at=20.0))
    updated = RunRecord(
        run_id="r1",
        name="b",
        state=SUCCEEDED,
        created_at=30.0,
        updated_at=40.0,
        data=b"new data",
        idempotency_key="k",
    )
    store.update_run(updated)

    assert store.get_run("r1") == updated
    assert [r.run_id for r in store.list_runs(states=[PENDING])[0]] == ["r2"]
    assert [r.run_id for r in store.list_runs(states=[SUCCEEDED])[0]] == ["r1"]
    assert [r.run_id for r in store.list_runs()[0]] == ["r1", "r2"]
    assert store.get_run_by_name("a").run_id == "r2"
    assert store.get_run_by_name("b").run_id == "r1"
    assert store.create_run(_run("r3", key="k")).run_id == "r1"


def test_update_unknown_run_raises_key_error(store: MetadataStore) -> None:
    with pytest.raises(KeyError):
        store.update_run(_run("ghost"))
    assert store.get_run("ghost") is None


def test_get_run_by_name_returns_newest(store: MetadataStore) -> None:
    store.create_run(_run("r1", name="job", created_at=100.0))
    store.create_run(_run("r3", name="job", created_at=300.0))
    store.create_run(_run("r2", name="job", created_at=200.0))
    store.create_run(_run("r9", name="other", created_at=900.0))
    assert store.get_run_by_name("job").run_id == "r3"
    assert store.get_run_by_name("other").run_id == "r9"


def test_list_runs_newest_first_with_state_filter(store: MetadataStore) -> None:
    states = [PENDING, RUNNING, SUCCEEDED, RUNNING, FAILED, PENDING]
    for i, state in enumerate(states):
        store.create_run(_run(f"r{i}", state=state, created_at=100.0 + i))

    runs, token = store.list_runs()
    assert token == ""
    assert [r.run_id for r in runs] == ["r5", "r4", "r3", "r2", "r1", "r0"]
    assert runs[0] == _run("r5", state=PENDING, created_at=105.0)

    assert [r.run_id for r in store.list_runs(states=[RUNNING])[0]] == ["r3", "r1"]
    assert [r.run_id for r in store.list_runs(states=[PENDING, FAILED])[0]] == ["r5", "r4", "r0"]
    assert store.list_runs(states=[99]) == ([], "")


def test_list_runs_pages_without_duplicates_or_gaps(store: MetadataStore) -> None:
    for i in range(7):
        store.create_run(_run(f"r{i}", created_at=100.0 + i))
    expected = [f"r{i}" for i in reversed(range(7))]

    first, token = store.list_runs(page_size=3)
    assert [r.run_id for r in first] == expected[:3]
    assert token and isinstance(token, str)

    ids, pages = _all_pages(store, page_size=3)
    assert ids == expected
    assert pages == 3
    for size in (1, 2, 6, 7, 8):
        assert _all_pages(store, page_size=size)[0] == expected


def test_list_runs_ties_broken_by_run_id(store: MetadataStore) -> None:
    # Equal timestamps and awkward ids: paging must still be exact.
    runs = [
        _run("a|1", created_at=50.0, state=RUNNING),
        _run("b", created_at=50.0, state=PENDING),
        _run("c:x", created_at=50.0, state=RUNNING),
        _run("d", created_at=-1.5, state=PENDING),
        _run("e", created_at=0.0, state=RUNNING),
        _run("f", created_at=50.0, state=FAILED),
        _run("g", created_at=1e9, state=PENDING),
    ]
    for r in runs:
        store.create_run(r)
    expected = [r.run_id for r in sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)]
    assert expected == ["g", "f", "c:x", "b", "a|1", "e", "d"]
    for size in range(1, 9):
        assert _all_pages(store, page_size=size)[0] == expected
        assert _all_pages(store, page_size=size, states=(RUNNING, PENDING))[0] == [i for i in expected if i != "f"]


def test_list_runs_rejects_malformed_page_token(store: MetadataStore) -> None:
    store.create_run(_run("r1"))
    bad_tokens = [
        "not a token!",
        "@@@@",
        base64.urlsafe_b64encode(b"no separator").decode(),
        base64.urlsafe_b64encode(b"abc|r1").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe|r1").decode(),
        "ünïcode",
    ]
    for token in bad_tokens:
        with pytest.raises(ValueError, match="page_token is malformed"):
            store.list_runs(page_token=token)


def test_list_runs_rejects_bad_page_size(store: MetadataStore) -> None:
    with pytest.raises(ValueError):
        store.list_runs(page_size=0)


def test_append_event_ids_per_run(store: MetadataStore) -> None:
    assert [store.append_event("a", f"a{i}".encode()) for i in range(1, 4)] == [1, 2, 3]
    assert store.append_event("b", b"b1") == 1
    assert store.append_event("a", b"a4") == 4
    assert store.read_events("a") == [(1, b"a1"), (2, b"a2"), (3, b"a3"), (4, b"a4")]
    assert store.read_events("b") == [(1, b"b1")]
    assert store.read_events("missing") == []


def test_read_events_after_and_limit(store: MetadataStore) -> None:
    for i in range(1, 11):
        store.append_event("r", bytes([i, 0, 255]))
    events = store.read_events("r", after_event_id=3, limit=4)
    assert events == [(i, bytes([i, 0, 255])) for i in range(4, 8)]
    assert all(isinstance(event_id, int) for event_id, _ in events)
    assert [e for e, _ in store.read_events("r", after_event_id=8)] == [9, 10]
    assert store.read_events("r", after_event_id=10) == []
    assert store.read_events("r", limit=0) == []
    assert len(store.read_events("r", limit=1000)) == 10


def test_append_event_concurrent(store: MetadataStore) -> None:
    ids: list[int] = []
    lock = threading.Lock()

    def append(t: int) -> None:
        for i in range(20):
            event_id = store.append_event("r", f"{t}-{i}".encode())
            with lock:
                ids.append(event_id)

    threads = [threading.Thread(target=append, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ids) == list(range(1, 161))
    assert [e for e, _ in store.read_events("r")] == list(range(1, 161))


def test_open_sqlite_urls(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "dir" / "meta.db"
    s = open_metadata_store(f"sqlite://{db}")
    assert isinstance(s, SQLiteMetadataStore)
    s.create_run(_run("r1"))
    s.close()
    s = open_metadata_store(str(db))
    assert s.get_run("r1") == _run("r1")
    s.close()

    bare = tmp_path / "other" / "meta.db"
    s = open_metadata_store(str(bare))
    assert isinstance(s, SQLiteMetadataStore)
    assert bare.parent.is_dir()
    s.close()

    s = open_metadata_store("sqlite://:memory:")
    assert isinstance(s, SQLiteMetadataStore)
    s.create_run(_run("m"))
    assert s.get_run("m") == _run("m")
    s.close()


def test_open_redis_urls(redis_url: str) -> None:
    s = open_metadata_store(redis_url)
    assert isinstance(s, RedisMetadataStore)
    assert s.get_run(f"missing-{uuid.uuid4().hex}") is None
    s.close()
    # rediss:// is accepted; constructing does not connect.
    s = open_metadata_store("rediss://127.0.0.1:1/0")
    assert isinstance(s, RedisMetadataStore)
    s.close()


@pytest.mark.parametrize("url", ["foo://x", "http://example.com/db", "sqlite://relative.db", "sqlite://", ""])
def test_open_rejects_unknown_urls(url: str) -> None:
    with pytest.raises(ValueError) as info:
        open_metadata_store(url)
    message = str(info.value)
    assert repr(url) in message
    assert "redis://" in message and "sqlite:///" in message


def test_sqlite_urls_do_not_import_redis() -> None:
    code = (
        "import sys\n"
        "from trainwire_coordinator.metadata import open_metadata_store\n"
        "open_metadata_store('sqlite://:memory:').close()\n"
        "assert 'redis' not in sys.modules, 'redis was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20, env=env)


def test_batched_watch_sends_the_events_watch_sends(tmp_path):
    """WatchRunBatched builds its batches from the stored bytes: the same events, ids and all."""
    import asyncio

    from google.protobuf import struct_pb2

    from trainwire_coordinator.metadata import open_metadata_store
    from trainwire_coordinator.run_streams import EventLog
    from trainwire_core.v1 import common_pb2, coordinator_pb2

    metadata = open_metadata_store(str(tmp_path / "state.db"))
    log = EventLog(metadata, poll_s=0.05)

    async def main() -> tuple[list, list]:
        for k in range(1, 301):  # ids past one and two varint bytes
            metrics = struct_pb2.Struct()
            metrics.update({"loss": 1.0 / k, "nested": {"lr": 0.1}})
            await log.append(
                coordinator_pb2.RunEvent(
                    run_id="r", metrics=coordinator_pb2.MetricsEvent(report_index=k, metrics=metrics)
                )
            )
        await log.append(
            coordinator_pb2.RunEvent(run_id="r", state_change=coordinator_pb2.StateChange(state=common_pb2.SUCCEEDED))
        )
        one = [e async for e in log.watch("r", 7, lambda: True, live=False)]
        batched = [b async for b in log.watch_batched("r", 7, lambda: True, live=False)]
        return one, batched

    one, batched = asyncio.run(main())
    flat = [e for b in batched for e in b.events]
    assert len(one) == 294 and [e.event_id for e in one] == list(range(8, 302))
    assert flat == one


def test_documents_are_kept_by_kind_and_key(store: MetadataStore) -> None:
    assert store.get_document("tune", "a") is None
    assert store.list_documents("tune") == []
    store.put_document("tune", "a", b"one")
    store.put_document("tune", "a", b"two")
    store.put_document("other", "a", b"elsewhere")
    assert store.get_document("tune", "a") == b"two"
    assert store.create_document("tune", "a", b"three") == b"two"  # exists: the stored one wins
    assert store.create_document("tune", "b", b"new") == b"new"
    assert sorted(store.list_documents("tune")) == [b"new", b"two"]
    assert store.list_documents("other") == [b"elsewhere"]
