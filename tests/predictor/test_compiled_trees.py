"""Compiled tree models: same outputs as the framework's predict, cached in the store, checked before dlopen."""

from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pandas as pd
import pytest
from conftest import commit_checkpoint

from trainwire_core.manifest import COMPILED_DIR, verify_checkpoint
from trainwire_core.storage import Store
from trainwire_predictor.compiled_trees import TreeCompiler, compile_booster
from trainwire_predictor.model_repository import ModelRepository

pytest.importorskip("tl2cgen")
pytestmark = pytest.mark.timeout(300)

ROWS, FEATURES = 400, 6


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, FEATURES))
    x[rng.random(x.shape) < 0.05] = np.nan  # missing values take each tree's default branch
    return x, np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]) - np.nan_to_num(x[:, 2]) ** 2


def _xgb(objective: str, **params):
    import xgboost

    from trainwire.xgboost.checkpoint import XGBoostCheckpoint

    x, score = _data()
    label = {"binary:logistic": score > 0, "reg:squarederror": score}.get(objective)
    if label is None:  # multi-class
        label = np.digitize(score, [-1.0, 0.0, 1.0])
        params["num_class"] = 4
    booster = xgboost.train(
        {"objective": objective, "max_depth": 4, "nthread": 1, **params},
        xgboost.DMatrix(x, label=label.astype(float)),
        12,
    )
    return XGBoostCheckpoint.from_model(booster).path


def _lgb(objective: str):
    import lightgbm

    from trainwire.lightgbm.checkpoint import LightGBMCheckpoint

    x, score = _data()
    params = {"objective": objective, "verbose": -1, "num_threads": 1, "num_leaves": 8}
    if objective == "multiclass":
        label, params["num_class"] = np.digitize(score, [-1.0, 0.0, 1.0]), 4
    else:
        label = (score > 0).astype(int)
    booster = lightgbm.train(params, lightgbm.Dataset(x, label=label), 12)
    return LightGBMCheckpoint.from_model(booster).path


MODELS = {
    "xgb-binary": lambda: _xgb("binary:logistic"),
    "xgb-regression": lambda: _xgb("reg:squarederror"),
    "xgb-multiclass": lambda: _xgb("multi:softprob"),
    "lgb-binary": lambda: _lgb("binary"),
    "lgb-multiclass": lambda: _lgb("multiclass"),
}


@pytest.fixture(scope="module")
def tree_store(tmp_path_factory):
    """A store with one committed checkpoint per model kind (run name = model kind)."""
    store = Store(str(tmp_path_factory.mktemp("compiled-store")))
    for name, make in MODELS.items():
        commit_checkpoint(store, f"run-{name}", name, "c1", make())
    return store


def _repo(store: Store, tmp_path, **kwargs) -> ModelRepository:
    kwargs.setdefault("compiler", TreeCompiler(local_dir=str(tmp_path / f"local-{os.urandom(4).hex()}")))
    return ModelRepository(store, index_refresh_s=0, compile_tree_models=True, **kwargs)


def _load(repo: ModelRepository, name: str):
    async def go():
        model = await repo.get(name)
        return model, await repo.wait_compiled(name)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def compiled_models(tree_store, tmp_path_factory):
    """Each model loaded and compiled once by one repository (as a fresh predictor would)."""
    tmp = tmp_path_factory.mktemp("compiled-local")
    repo = _repo(tree_store, tmp)
    return repo, {name: _load(repo, name) for name in MODELS}


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_outputs_match_the_framework(compiled_models, name):
    repo, loaded = compiled_models
    model, result = loaded[name]
    assert result is not None and result.compiled is not None, result
    assert result.compiled_now and model.compile_result is result
    assert model.predictor.compiled is result.compiled
    x, _ = _data(seed=7)
    expected = model.predictor.framework_predict(x)
    got = model.predictor.predict_columns(x)
    got = np.column_stack(list(got.values())) if len(got) > 1 else next(iter(got.values()))
    assert got.shape == np.squeeze(expected).shape
    assert got.dtype == expected.dtype  # the advertised output datatypes stay the same
    np.testing.assert_allclose(got, np.squeeze(expected), rtol=0, atol=1e-6)
    if "multiclass" in name:
        assert got.shape == (len(x), 4)
    # Calls with framework-specific arguments still go to the framework.
    if name.startswith("xgb"):
        margin = model.predictor.predict_columns(x, predict_type="margin")
        assert not np.allclose(next(iter(margin.values())), next(iter(model.predictor.predict_columns(x).values())))


def test_compiled_model_is_thread_safe(compiled_models):
    _, loaded = compiled_models
    compiled = loaded["xgb-multiclass"][1].compiled
    x, _ = _data(seed=3)
    expected = compiled.predict(x)
    failures = []

    def hammer(offset: int) -> None:
        for i in range(50):
            rows = slice((offset + i) % 300, (offset + i) % 300 + 32)
            if not np.array_equal(compiled.predict(x[rows]), expected[rows]):
                failures.append(rows)

    threads = [threading.Thread(target=hammer, args=(k * 17,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_second_load_reuses_the_cached_library(tree_store, compiled_models, tmp_path):
    # A restart or another replica: a new repository and compiler, the same store.
    repo = _repo(tree_store, tmp_path)
    for name in ("xgb-binary", "lgb-multiclass"):
        model, result = _load(repo, name)
        assert result.compiled is not None and not result.compiled_now
        assert model.predictor.compiled is result.compiled
    assert sum(repo.compiler.compilations.values()) == 0
    assert sum(repo.compiler.reused.values()) == 2
    # The first repository compiled each model exactly once.
    first = compiled_models[0].compiler
    assert sorted(first.compilations.values()) == [1] * len(MODELS)


def _record(store: Store, name: str) -> tuple[str, dict]:
    directory = store.checkpoint_dir(f"run-{name}", "c1")
    records = [n for n in store.list_dir(f"{directory}/{COMPILED_DIR}") if n.endswith(".json")]
    assert len(records) == 1, records
    return directory, store.read_json(f"{directory}/{COMPILED_DIR}/{records[0]}")


def test_tampered_cached_library_is_refused_and_compiled_again(tree_store, compiled_models, tmp_path):
    directory, record = _record(tree_store, "xgb-regression")
    lib_path = f"{directory}/{COMPILED_DIR}/{record['library']}"
    data = bytearray(tree_store.read_bytes(lib_path))
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    tree_store.write_bytes(lib_path, bytes(data))

    repo = _repo(tree_store, tmp_path)
    model, result = _load(repo, "xgb-regression")
    assert sum(repo.compiler.refused.values()) == 1
    assert sum(repo.compiler.compilations.values()) == 1 and result.compiled_now
    assert result.compiled is not None
    # The tampered bytes were never loaded: the library served is the recompiled one.
    with open(result.compiled.libpath, "rb") as f:
        assert f.read() != bytes(data)
    x, _ = _data(seed=5)
    np.testing.assert_allclose(
        model.predictor.predict_columns(x)["predictions"], model.predictor.framework_predict(x), rtol=0, atol=1e-6
    )
    # The cache is whole again: the next replica reuses it.
    again = _repo(tree_store, tmp_path)
    assert not _load(again, "xgb-regression")[1].compiled_now


def test_tampered_record_is_refused(tree_store, compiled_models, tmp_path):
    directory, record = _record(tree_store, "lgb-binary")
    record_name = next(n for n in tree_store.list_dir(f"{directory}/{COMPILED_DIR}") if n.endswith(".json"))
    tree_store.write_json(f"{directory}/{COMPILED_DIR}/{record_name}", {**record, "sha256": "0" * 64})
    repo = _repo(tree_store, tmp_path)
    _, result = _load(repo, "lgb-binary")
    assert sum(repo.compiler.refused.values()) == 1 and result.compiled_now and result.compiled is not None


def test_manifest_checks_ignore_the_cache(tree_store, compiled_models):
    directory, _ = _record(tree_store, "xgb-binary")
    assert tree_store.list_dir(f"{directory}/{COMPILED_DIR}")
    assert verify_checkpoint(tree_store, directory) >= 1
    # Even a manifest that names a cache file does not check it.
    manifest = tree_store.read_json(f"{directory}/manifest.json")
    manifest["files"].append({"path": f"{COMPILED_DIR}/stale.so", "size_bytes": 1, "sha256": "0" * 64})
    tree_store.write_json(f"{directory}/manifest.json", manifest)
    verify_checkpoint(tree_store, directory)


def test_setting_switches_compilation_off(tree_store, tmp_path, monkeypatch):
    from trainwire_predictor.settings import PredictorSettings

    assert PredictorSettings().compile_tree_models is True
    monkeypatch.setenv("TRAINWIRE_PREDICTOR_COMPILE_TREE_MODELS", "false")
    settings = PredictorSettings()
    assert settings.compile_tree_models is False
    repo = _repo(tree_store, tmp_path)
    repo.compile_tree_models = settings.compile_tree_models
    model, result = _load(repo, "xgb-binary")
    assert result is None and model.predictor.compiled is None
    assert sum(repo.compiler.compilations.values()) == 0


def test_compile_failure_falls_back_to_the_framework(tree_store, tmp_path):
    def broken(framework, booster, libpath):
        raise RuntimeError("no C compiler here")

    repo = _repo(tree_store, tmp_path, compiler=TreeCompiler(local_dir=str(tmp_path / "b"), compile_fn=broken))
    # A fresh checkpoint: nothing cached for it yet.
    commit_checkpoint(tree_store, "run-fresh", "fresh", "c1", _xgb("binary:logistic", eta=0.2))
    model, result = _load(repo, "fresh")
    assert result.compiled is None and "no C compiler here" in result.reason
    assert model.predictor.compiled is None
    x, _ = _data()
    np.testing.assert_array_equal(
        model.predictor.predict_columns(x)["predictions"], model.predictor.framework_predict(x)
    )


def test_a_library_that_disagrees_is_not_used(tree_store, tmp_path):
    # A library compiled from another model passes its own sha256 check but not the probe rows.
    def wrong_model(framework, booster, libpath):
        import xgboost

        x, score = _data(seed=11)
        compile_booster(
            framework, xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(x, label=score > 1), 3), libpath
        )

    repo = _repo(tree_store, tmp_path, compiler=TreeCompiler(local_dir=str(tmp_path / "w"), compile_fn=wrong_model))
    commit_checkpoint(tree_store, "run-wrong", "wrong", "c1", _xgb("binary:logistic", eta=0.1))
    model, result = _load(repo, "wrong")
    assert result.compiled is None and "differ" in result.reason
    assert model.predictor.compiled is None


def test_the_service_serves_the_compiled_forest_from_the_first_answer(tree_store):
    """Settings -> server -> repository: the first load compiles; every answer comes from the compiled forest."""
    from trainwire.predictor_client import PredictorClient
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    commit_checkpoint(tree_store, "run-served", "served", "c1", _lgb("multiclass"))
    thread = PredictorThread(PredictorSettings(port=0, store=tree_store.uri, index_refresh_s=0.2))
    thread.start()
    try:
        x, _ = _data(seed=8)
        with PredictorClient(thread.server.address) as client:
            first = client.predict("served", x[:40])
            again = client.predict("served", x[:40])
        model = asyncio.run_coroutine_threadsafe(thread.models.get("served"), thread.loop).result(30)
        result = model.compile_result
        assert result is not None and result.compiled is not None and result.compiled_now
        assert model.predictor.compiled is result.compiled
        assert list(first.columns) == [f"predictions_{i}" for i in range(4)]
        # One model version answers one input one way: the compiled forest from the first answer on.
        pd.testing.assert_frame_equal(first, again, check_exact=True)
        np.testing.assert_array_equal(first.to_numpy(), result.compiled.predict(x[:40]))
        np.testing.assert_allclose(first.to_numpy(), model.predictor.framework_predict(x[:40]), rtol=0, atol=1e-6)
    finally:
        thread.stop()
