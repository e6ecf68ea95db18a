"""In-process Predictors: inputs in every form, the checkpoint's preprocessor applied."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainwire.checkpoint import Checkpoint
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(120)


def test_xgboost_predictor_accepts_frame_array_and_dict(local_booster, valid_x):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    predictor = XGBoostPredictor.from_checkpoint(XGBoostCheckpoint.from_model(local_booster))
    import xgboost

    expected = local_booster.predict(xgboost.DMatrix(valid_x))
    by_frame = predictor.predict(valid_x)
    assert list(by_frame.columns) == ["predictions"]
    np.testing.assert_allclose(by_frame["predictions"], expected, rtol=1e-6)
    # Numpy in, numpy out (as Ray 2.4's): the predictions column's array.
    np.testing.assert_array_equal(predictor.predict(valid_x.to_numpy()), by_frame["predictions"].to_numpy())
    by_dict = predictor.predict({c: valid_x[c].to_numpy() for c in valid_x})
    np.testing.assert_array_equal(by_dict, by_frame["predictions"].to_numpy())
    # Columns in another order, and extra columns, are matched by name.
    shuffled = valid_x[valid_x.columns[::-1]].assign(row_id=range(len(valid_x)))
    pd.testing.assert_frame_equal(predictor.predict(shuffled), by_frame)


def test_xgboost_predictor_applies_the_preprocessor(local_booster, valid_x, fitted_scaler):
    from trainwire.xgboost.checkpoint import XGBoostCheckpoint
    from trainwire.xgboost.predictor import XGBoostPredictor

    ckpt = XGBoostCheckpoint.from_model(local_booster, preprocessor=fitted_scaler)
    predictor = XGBoostPredictor.from_checkpoint(ckpt)
    assert predictor.get_preprocessor() is not None
    out = predictor.predict(valid_x)
    plain = XGBoostPredictor(local_booster).predict(fitted_scaler.transform_batch(valid_x.copy()))
    pd.testing.assert_frame_equal(out, plain)
    np.testing.assert_array_equal(predictor.predict(valid_x.to_numpy()), out["predictions"].to_numpy())


def test_missing_column_is_invalid_argument(local_booster, valid_x):
    from trainwire.xgboost.predictor import XGBoostPredictor

    with pytest.raises(InvalidArgumentError, match="missing input column\\(s\\): mean_radius"):
        XGBoostPredictor(local_booster).predict(valid_x.drop(columns=["mean_radius"]))


def test_torch_predictor_whole_model_and_state_dict(tmp_path, valid_x):
    import torch

    from trainwire.torch.checkpoint import TorchCheckpoint
    from trainwire.torch.predictor import TorchPredictor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(30, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = valid_x.to_numpy(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    whole = TorchPredictor.from_checkpoint(TorchCheckpoint.from_model(model)).predict(x)
    assert list(whole) == ["predictions"]  # numpy in: Ray's {"predictions": (N, 2)}
    np.testing.assert_allclose(whole["predictions"], expected, rtol=1e-6)
    fresh = torch.nn.Sequential(torch.nn.Linear(30, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ckpt = TorchCheckpoint.from_state_dict(model.state_dict())
    by_state = TorchPredictor.from_checkpoint(Checkpoint(ckpt.uri), model=fresh).predict(valid_x)
    np.testing.assert_allclose(by_state.to_numpy(), expected, rtol=1e-6)


def test_a_torch_predictor_prepared_for_batches_keeps_its_weights_and_answers(valid_x):
    import torch

    from trainwire.torch.predictor import TorchPredictor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    weights = [layer.weight.detach().clone() for layer in (model[0], model[2])]
    x = valid_x.to_numpy(np.float32)
    predictor = TorchPredictor(model)
    before = predictor.predict(x)["predictions"]
    predictor.prepare_for_batches()
    for layer, weight in zip((model[0], model[2]), weights):
        # The same values and shape, stored transposed: the transpose is contiguous now.
        assert torch.equal(layer.weight, weight) and layer.weight.t().is_contiguous()
        assert isinstance(layer.weight, torch.nn.Parameter)
    np.testing.assert_allclose(predictor.predict(x)["predictions"], before, rtol=1e-5, atol=1e-6)
    for rows in (1, 2, 8):
        np.testing.assert_allclose(predictor.predict(x[:rows])["predictions"], before[:rows], rtol=1e-5, atol=1e-6)


def test_sklearn_predictor(tmp_path, cancer_data, features, valid_x):
    import cloudpickle
    from sklearn.linear_model import LogisticRegression

    from trainwire.sklearn.predictor import SklearnPredictor

    train_df = cancer_data[0]
    est = LogisticRegression(max_iter=5000).fit(train_df[features], train_df["target"])
    (tmp_path / "model.pkl").write_bytes(cloudpickle.dumps(est))
    predictor = SklearnPredictor.from_checkpoint(Checkpoint.from_directory(tmp_path))
    assert predictor.feature_columns == features
    out = predictor.predict(valid_x.to_numpy())
    np.testing.assert_array_equal(out, est.predict(valid_x))
