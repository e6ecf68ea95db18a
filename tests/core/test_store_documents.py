"""The store contract: typed documents, files an earlier release wrote, and no key read outside core."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import shutil

import pytest

from trainwire_core.errors import DataLossError
from trainwire_core.storage import Store
from trainwire_core.store_documents import (
    SCHEMA_VERSION,
    CheckpointIndex,
    RegistryState,
    RouteWeight,
    TrafficPolicy,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
# checkpoints.json and aliases.json as the release before the typed contract wrote them (no schema_version).
BEFORE = pathlib.Path(__file__).parent / "fixtures" / "store_before_schema"
RUN_ID = "0123456789abcdef"


def _old_store(tmp_path) -> Store:
    store = Store(str(tmp_path / "store"))
    run_dir = pathlib.Path(store.run_dir(RUN_ID))
    run_dir.mkdir(parents=True)
    for name in ("checkpoints.json", "aliases.json"):
        shutil.copy(BEFORE / name, run_dir / name)
    store.write_json(store.name_path("churn-model"), {"run_id": RUN_ID})
    return store


def test_files_an_earlier_release_wrote_read_as_the_same_documents(tmp_path):
    store = _old_store(tmp_path)
    index = CheckpointIndex.read(store, RUN_ID)
    assert index is not None and index.schema_version == 0
    assert index.ordered_ids == ("checkpoint_000001", "checkpoint_000002", "checkpoint_000003")
    assert index.best == "checkpoint_000002" and index.default_version() == "checkpoint_000002"
    assert index.checkpoints[1].metrics["acc"] == 0.9 and index.score_attribute == "acc"
    state = RegistryState.read(store, RUN_ID)
    assert state.aliases == {"canary": "checkpoint_000003", "production": "checkpoint_000002"}
    assert [(m.alias, m.version, m.moved_by) for m in state.history] == [
        ("production", "checkpoint_000002", "ops"),
        ("canary", "checkpoint_000003", "ops"),
    ]
    assert state.route.weights == (RouteWeight("production", 90), RouteWeight("canary", 10))
    assert state.route.shadow == "checkpoint_000001"
    assert state.served_versions() == {
        "checkpoint_000001",
        "checkpoint_000002",
        "checkpoint_000003",
        "production",
        "canary",
    }


def test_the_predictor_serves_an_earlier_release_s_store_by_alias_and_policy(tmp_path):
    from trainwire_predictor.inference import InferenceRequest
    from trainwire_predictor.model_repository import ModelRepository
    from trainwire_predictor.routing import Router

    repo = ModelRepository(_old_store(tmp_path), index_refresh_s=60)
    router = Router(repo)

    async def go() -> tuple[str, str, set[str]]:
        best = (await repo.resolve("churn-model")).checkpoint_id
        canary = (await repo.resolve("churn-model", "canary")).checkpoint_id
        resolution = await repo.resolution("churn-model")
        assert resolution is not None and resolution.checkpoints["production"] == best
        picked = set()
        for key in range(200):
            routed, shadow = router.route(InferenceRequest("churn-model", "", routing_key=f"user-{key}"), resolution)
            assert shadow == "checkpoint_000001"
            picked.add(routed.model_version)
        return best, canary, picked

    assert asyncio.run(go()) == ("checkpoint_000002", "checkpoint_000003", {"production", "canary"})


def test_documents_round_trip_with_their_schema_version(tmp_path):
    store = _old_store(tmp_path)
    index = CheckpointIndex.read(store, RUN_ID)
    assert index is not None
    again = CheckpointIndex.from_json(json.loads(json.dumps(index.to_json())))
    assert again.to_json() == index.to_json() and again.schema_version == SCHEMA_VERSION
    state = RegistryState.read(store, RUN_ID).with_alias(RUN_ID, "production", "checkpoint_000003", "ci")
    state = state.with_route(RUN_ID, [("production", 100)], "", "ci")
    state.write(store)
    back = RegistryState.read(store, RUN_ID)
    assert back == state and back.history[-1].previous_version == "checkpoint_000002"
    assert back.route == TrafficPolicy((RouteWeight("production", 100),), "", 2, back.route.time, "ci")


def test_a_newer_schema_is_refused_not_misread():
    with pytest.raises(DataLossError, match="schema_version 99"):
        CheckpointIndex.from_json({"schema_version": 99, "run_id": "r", "checkpoints": []})
    with pytest.raises(DataLossError, match="schema_version 99"):
        RegistryState.from_json({"schema_version": 99})
    with pytest.raises(DataLossError):
        CheckpointIndex.from_json({"checkpoints": [{"no": "id"}]})


# The keys of checkpoints.json and aliases.json; indexing them is core's business alone.
_KEYS = "checkpoints|aliases|route|history|weights|shadow|best|latest|score_attribute|score_order|schema_version"
_INDEXED = re.compile(rf"""\[\s*["']({_KEYS})["']\s*\]|\.get\(\s*["']({_KEYS})["']""")


def test_no_key_of_the_store_documents_is_indexed_outside_core():
    offenders = []
    for package in ("client", "coordinator", "predictor", "console", "worker"):
        for path in (ROOT / package).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _INDEXED.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
