"""Name/version resolution through the committed index, and the loaded-model cache."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time

import pytest
from conftest import commit_checkpoint

from trainwire.config import CheckpointConfig
from trainwire_core.errors import FailedPreconditionError, NotFoundError
from trainwire_core.storage import Store
from trainwire_predictor.model_repository import ModelRepository, load_predictor

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def xgb_dir(local_booster, tmp_path):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    return XGBoostCheckpoint.from_model(local_booster).path


@pytest.fixture
def local_store(tmp_path):
    return Store(str(tmp_path / "store"))


def test_resolves_name_id_best_and_latest(local_store, xgb_dir):
    config = CheckpointConfig(checkpoint_score_attribute="index", checkpoint_score_order="min")
    manager = commit_checkpoint(local_store, "run-a", "cancer", "c1", xgb_dir, 1, config)
    commit_checkpoint(local_store, "run-a", "cancer", "c2", xgb_dir, 2, manager=manager)
    repo = ModelRepository(local_store, index_refresh_s=0)

    async def go():
        best = await repo.resolve("cancer")
        assert (best.run_id, best.checkpoint_id, best.versions) == ("run-a", "c1", ("c1", "c2"))
        assert (await repo.resolve("run-a", "c2")).checkpoint_id == "c2"
        with pytest.raises(NotFoundError, match="model 'nope' not found") as err:
            await repo.resolve("nope")
        assert err.value.field == "model_name"
        with pytest.raises(NotFoundError, match="no version 'c9'; committed versions: c1, c2") as err:
            await repo.resolve("cancer", "c9")
        assert err.value.field == "model_version"

    asyncio.run(go())
    # Without a score attribute the best is the latest.
    plain = commit_checkpoint(local_store, "run-b", "plain", "p1", xgb_dir, 1)
    commit_checkpoint(local_store, "run-b", "plain", "p2", xgb_dir, 2, manager=plain)
    assert asyncio.run(repo.resolve("plain")).checkpoint_id == "p2"


def test_concurrent_first_requests_load_once(local_store, xgb_dir):
    commit_checkpoint(local_store, "run-c", "conc", "c1", xgb_dir)
    calls = []

    def slow_loader(store, run_id, ckpt_id):
        calls.append(threading.get_ident())
        time.sleep(0.2)
        return load_predictor(store, run_id, ckpt_id)

    repo = ModelRepository(local_store, loader=slow_loader)

    async def go():
        models = await asyncio.gather(*(repo.get("conc") for _ in range(20)))
        assert len({id(m) for m in models}) == 1
        await repo.get("conc")

    asyncio.run(go())
    assert repo.load_count == 1 and len(calls) == 1
    assert repo.loads[("run-c", "c1")] == 1


def test_lru_drops_the_least_recently_used(local_store, xgb_dir):
    manager = commit_checkpoint(local_store, "run-d", "lru", "c1", xgb_dir, 1)
    commit_checkpoint(local_store, "run-d", "lru", "c2", xgb_dir, 2, manager=manager)
    repo = ModelRepository(local_store, cache_size=1)

    async def go():
        await repo.get("lru", "c1")
        await repo.get("lru", "c1")
        await repo.get("lru", "c2")  # evicts c1
        await repo.get("lru", "c1")

    asyncio.run(go())
    assert repo.loads[("run-d", "c1")] == 2 and repo.loads[("run-d", "c2")] == 1


def test_sees_new_checkpoints(local_store, xgb_dir):
    manager = commit_checkpoint(local_store, "run-e", "fresh", "c1", xgb_dir, 1)
    repo = ModelRepository(local_store, index_refresh_s=0.1)

    async def go():
        assert (await repo.get("fresh")).ref.checkpoint_id == "c1"
        commit_checkpoint(local_store, "run-e", "fresh", "c2", xgb_dir, 2, manager=manager)
        # Asked for by id, a new checkpoint is found at once; as the default, after the refresh age.
        assert (await repo.get("fresh", "c2")).ref.checkpoint_id == "c2"
        await asyncio.sleep(0.15)
        assert (await repo.get("fresh")).ref.checkpoint_id == "c2"

    asyncio.run(go())


def test_corrupt_checkpoint_names_the_model_and_others_keep_serving(local_store, xgb_dir):
    bad = tempfile.mkdtemp()
    with open(os.path.join(bad, "model.ubj"), "wb") as f:
        f.write(b"not a model")
    commit_checkpoint(local_store, "run-f", "broken", "c1", bad)
    commit_checkpoint(local_store, "run-g", "good", "c1", xgb_dir)
    repo = ModelRepository(local_store)

    async def go():
        with pytest.raises(FailedPreconditionError, match="model 'broken' version 'c1' cannot be loaded"):
            await repo.get("broken")
        assert (await repo.get("good")).framework == "xgboost"

    asyncio.run(go())


def test_unload_drops_one_version_or_all(local_store, xgb_dir):
    manager = commit_checkpoint(local_store, "run-u", "versions", "c1", xgb_dir, 1)
    commit_checkpoint(local_store, "run-u", "versions", "c2", xgb_dir, 2, manager=manager)
    repo = ModelRepository(local_store)

    async def go():
        refs = [(await repo.get("versions", v)).ref for v in ("c1", "c2")]
        assert await repo.unload("versions", "c1") == 1
        assert [repo.is_loaded(r) for r in refs] == [False, True]
        with pytest.raises(NotFoundError, match="no version 'c9'"):
            await repo.unload("versions", "c9")
        await repo.get("versions", "c1")
        assert await repo.unload("versions") == 2
        assert not any(repo.is_loaded(r) for r in refs)

    asyncio.run(go())


def test_a_byte_budget_drops_the_least_recently_used_but_never_a_model_in_flight(local_store, xgb_dir):
    manager = commit_checkpoint(local_store, "run-b", "budget", "c1", xgb_dir, 1)
    for i in (2, 3, 4):
        commit_checkpoint(local_store, "run-b", "budget", f"c{i}", xgb_dir, i, manager=manager)
    size = sum(os.path.getsize(os.path.join(xgb_dir, f)) for f in os.listdir(xgb_dir))
    repo = ModelRepository(local_store, cache_bytes=2 * size + size // 2)  # room for two

    async def go():
        assert (await repo.get("budget", "c1")).size_bytes >= size  # the manifest's files
        await repo.get("budget", "c2")
        await repo.get("budget", "c3")  # over budget: c1, the least recently used, goes
        assert repo.cached_bytes() <= repo.cache_bytes
        c2 = await repo.get("budget", "c2")
        with c2.serving():
            await repo.get("budget", "c1")  # c3 is the least recently used idle one
            await repo.get("budget", "c4")  # c2 is older but scoring: c1 goes
            loaded = {k[1] for k in repo._cache}
            assert loaded == {"c2", "c4"}
            # Nothing idle to drop: the cache stays over budget rather than drop c2 mid-request.
            small = ModelRepository(local_store, cache_bytes=size)
            first = await small.get("budget", "c1")
            with first.serving():
                await small.get("budget", "c2")
                assert {k[1] for k in small._cache} == {"c1", "c2"}
            await small.get("budget", "c3")
            assert {k[1] for k in small._cache} == {"c3"}

    asyncio.run(go())
    assert repo.loads[("run-b", "c1")] == 2 and repo.evictions == 3  # c1, c3, c1
