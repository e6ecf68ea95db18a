"""Fitted Ray Data preprocessors as numpy: the same columns, values and dtypes as ``transform_batch``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainwire.preprocessor_transforms import vectorise

pytestmark = pytest.mark.timeout(300)

N = 120


def _train_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=N) * 3 + 1,
            "b": rng.integers(0, 10, N).astype(np.int64),
            "c": rng.normal(size=N).astype(np.float32),
            "s": rng.choice(["x", "y", "z"], N),
            "t": rng.choice(["p", "q"], N),
        }
    )
    frame.loc[::10, "a"] = np.nan
    return frame


def _request(rows: int = 32, seed: int = 1, unseen: bool = False, nulls: bool = True) -> dict[str, np.ndarray]:
    """A batch as the service decodes it: one 1-D array per column."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=rows) * 3
    if nulls:
        a[::5] = np.nan
    s = rng.choice(["x", "y", "z", "w"] if unseen else ["x", "y", "z"], rows).astype(object)
    return {
        "a": a,
        "b": rng.integers(0, 12, rows).astype(np.int64),
        "c": rng.normal(size=rows).astype(np.float32),
        "s": s,
        "t": rng.choice(["p", "q"], rows).astype(object),
    }


def _make(name: str):
    from ray.data import preprocessors as pp

    num = ["a", "b", "c"]
    return {
        "StandardScaler": lambda: pp.StandardScaler(num),
        "StandardScaler-outputs": lambda: pp.StandardScaler(["a", "b"], output_columns=["a2", "b2"]),
        "MinMaxScaler": lambda: pp.MinMaxScaler(num),
        "MaxAbsScaler": lambda: pp.MaxAbsScaler(num),
        "RobustScaler": lambda: pp.RobustScaler(num),
        "SimpleImputer-mean": lambda: pp.SimpleImputer(["a", "c"]),
        "SimpleImputer-most_frequent": lambda: pp.SimpleImputer(["a", "s"], strategy="most_frequent"),
        "SimpleImputer-constant": lambda: pp.SimpleImputer(["a"], strategy="constant", fill_value=-1.0),
        "OneHotEncoder": lambda: pp.OneHotEncoder(["s", "t"]),
        "OrdinalEncoder": lambda: pp.OrdinalEncoder(["s", "t", "b"]),
        "LabelEncoder": lambda: pp.LabelEncoder("s", output_column="s_code"),
        "Concatenator": lambda: pp.Concatenator(["a", "b", "c"]),
        "Concatenator-dtype": lambda: pp.Concatenator(["a", "b"], output_column_name="v", dtype=np.float32),
        "Chain": lambda: pp.Chain(
            pp.SimpleImputer(["a"]),
            pp.StandardScaler(["a", "b"]),
            pp.OrdinalEncoder(["s", "t"]),
            pp.MinMaxScaler(["c"]),
            pp.Concatenator(["a", "b", "c", "s", "t"], output_column_name="features"),
        ),
    }[name]()


KINDS = [
    "StandardScaler",
    "StandardScaler-outputs",
    "MinMaxScaler",
    "MaxAbsScaler",
    "RobustScaler",
    "SimpleImputer-mean",
    "SimpleImputer-most_frequent",
    "SimpleImputer-constant",
    "OneHotEncoder",
    "OrdinalEncoder",
    "LabelEncoder",
    "Concatenator",
    "Concatenator-dtype",
    "Chain",
]


@pytest.fixture(scope="module")
def fitted(ray_cluster):
    import ray.data

    ds = ray.data.from_pandas(_train_frame())
    out = {}
    for name in KINDS:
        p = _make(name)
        if name == "RobustScaler":
            # Its fit needs the optional datasketches package: the stats it would compute, by hand.
            train = _train_frame()
            p.stats_ = {}
            for col in ("a", "b", "c"):
                low, median, high = (float(np.nanquantile(train[col], q)) for q in (0.25, 0.5, 0.75))
                if col == "b":
                    low = median = high = 4.0  # a column without spread: zeros
                p.stats_.update({f"low_quantile({col})": low, f"median({col})": median, f"high_quantile({col})": high})
            out[name] = p
            continue
        out[name] = p.fit(ds) if p._is_fittable else p
    return out


def assert_same(got: dict, expected: pd.DataFrame) -> None:
    """Vectorised columns against ``transform_batch``'s frame: names and order, values (NaN too), dtypes."""
    assert list(got) == list(expected.columns)
    for name, arr in got.items():
        col = expected[name]
        if arr.ndim == 2:  # transform_batch holds one array per row
            want = np.stack(col.to_numpy())
            assert want.dtype == arr.dtype, name
            np.testing.assert_array_equal(arr, want, strict=True)
        elif arr.dtype == object:
            assert list(arr) == list(col), name
        else:
            want = col.to_numpy()
            assert want.dtype == arr.dtype, (name, want.dtype, arr.dtype)
            np.testing.assert_array_equal(arr, want, strict=True)


def _check(p, batch: dict[str, np.ndarray]) -> None:
    fn = vectorise(p)
    assert fn is not None
    got = fn(dict(batch))
    assert got is not None
    # The frame Predictor builds from a request.
    assert_same(got, p.transform_batch(pd.DataFrame(batch)))


@pytest.mark.parametrize("name", KINDS)
def test_same_as_transform_batch(fitted, name):
    p = fitted[name]
    _check(p, _request())
    _check(p, _request(rows=1, seed=4))
    _check(p, _request(rows=300, seed=5))


@pytest.mark.parametrize("name", ["OrdinalEncoder", "LabelEncoder", "OneHotEncoder"])
def test_unseen_categories(fitted, name):
    # Ordinal and label codes become NaN (float64), one-hot rows all zeros, as transform_batch does.
    _check(fitted[name], _request(unseen=True))


def test_float32_imputation(fitted):
    from ray.data.preprocessors import SimpleImputer

    batch = _request()
    batch["c"][::4] = np.nan
    _check(fitted["SimpleImputer-mean"], batch)  # the fitted mean (a Python float) is cast to float32
    # A numpy float64 that float32 cannot hold: pandas widens the column; transform_batch does it.
    wide = SimpleImputer(["c"], strategy="constant", fill_value=np.float64(0.1))
    assert vectorise(wide)(dict(batch)) is None
    _check(SimpleImputer(["c"], strategy="constant", fill_value=np.float64(0.5)), batch)


def test_nulls_in_encoded_columns_fall_back_to_transform_batch(fitted):
    batch = _request()
    batch["s"][3] = None
    assert vectorise(fitted["OrdinalEncoder"])(dict(batch)) is None
    with pytest.raises(ValueError, match="null"):
        fitted["OrdinalEncoder"].transform_batch(pd.DataFrame(batch))


def test_missing_columns_fall_back(fitted):
    batch = _request()
    del batch["b"]
    for name in ("StandardScaler", "Concatenator", "OrdinalEncoder"):
        assert vectorise(fitted[name])(dict(batch)) is None


def test_other_preprocessors_are_not_vectorised(ray_cluster):
    from ray.data.preprocessors import Chain, Normalizer, StandardScaler

    assert vectorise(None) is None
    assert vectorise(Normalizer(["a", "b"])) is None
    assert vectorise(StandardScaler(["a"])) is None  # not fitted: transform_batch raises
    assert vectorise(Chain(StandardScaler(["a"]), Normalizer(["a"]))) is None

    class Custom(StandardScaler):
        pass

    assert vectorise(Custom(["a"])) is None


MODEL_INPUTS = {
    "StandardScaler": ["a", "b", "c"],
    "RobustScaler": ["a", "b", "c"],
    "SimpleImputer-mean": ["a", "b", "c"],
    "OrdinalEncoder": ["a", "b", "c", "s", "t"],
    "LabelEncoder": ["a", "b", "s_code"],
}


@pytest.mark.parametrize("name", list(MODEL_INPUTS))
def test_predictions_same_with_and_without_vectorising(fitted, name):
    import xgboost

    from trainwire.xgboost.predictor import XGBoostPredictor

    p, inputs = fitted[name], MODEL_INPUTS[name]
    train = p.transform_batch(pd.DataFrame(_request(rows=200, seed=9)))[inputs]
    booster = xgboost.train({"max_depth": 3, "nthread": 1}, xgboost.DMatrix(train, label=np.arange(200) % 3), 4)
    fast = XGBoostPredictor(booster, preprocessor=p, feature_columns=list(_request()))
    slow = XGBoostPredictor(booster, preprocessor=p, feature_columns=list(_request()))
    assert fast._vectorised is not None
    slow._vectorised = None  # transform_batch, as before
    for batch in (_request(), _request(unseen=True, seed=3)):
        for data in (batch, pd.DataFrame(batch), np.column_stack(list(batch.values()))):
            if isinstance(data, np.ndarray) and name in ("OrdinalEncoder", "LabelEncoder"):
                data = data.astype(object)
            np.testing.assert_array_equal(
                fast.predict_columns(data)["predictions"], slow.predict_columns(data)["predictions"], strict=True
            )


def test_a_concatenated_column_is_the_model_input(fitted):
    from trainwire.predictor import Predictor

    class Linear(Predictor):
        def _predict_numpy(self, data, **kwargs):
            return data.astype(np.float64) @ np.arange(1.0, data.shape[1] + 1)

    p = fitted["Chain"]
    batch = _request()
    model = Linear(p)
    expected = np.stack(p.transform_batch(pd.DataFrame(batch))["features"].to_numpy()).astype(np.float64)
    np.testing.assert_array_equal(model.predict(batch), expected @ np.arange(1.0, 6.0))


def test_a_checkpoints_preprocessor_is_vectorised_after_loading(fitted):
    """What BatchPredictor's scoring workers and the service load: the checkpoint's own copy."""
    import xgboost

    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    p = fitted["Chain"]
    train = p.transform_batch(pd.DataFrame(_request(rows=100, seed=2)))
    features = np.stack(train["features"].to_numpy()).astype(np.float64)
    booster = xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(features, label=features[:, 0]), 3)
    loaded = XGBoostPredictor.from_checkpoint(XGBoostCheckpoint.from_model(booster, preprocessor=p))
    assert loaded._vectorised is not None and loaded._vectorised.name == "Chain"
    batch = _request()
    expected = np.stack(p.transform_batch(pd.DataFrame(batch))["features"].to_numpy()).astype(np.float64)
    np.testing.assert_array_equal(loaded.predict(batch), booster.inplace_predict(expected), strict=True)
