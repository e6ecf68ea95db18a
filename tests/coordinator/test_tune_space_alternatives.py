"""grid_search and choice over objects in the coordinator: checked, sampled by index, put in place.

The unit tests build requests by hand; the others run small searches on the session's coordinator: an
XGBoost grid over two preprocessors and two datasets, and a function trainable's grid over two functions.
"""

from __future__ import annotations

import cloudpickle
import pytest

from trainwire import RunConfig, ScalingConfig, tune
from trainwire.tune import TuneConfig, Tuner
from trainwire.xgboost import XGBoostTrainer
from trainwire_coordinator.tune.checks import check_access
from trainwire_coordinator.tune.space import SearchSpace
from trainwire_coordinator.tune.trials import trial_request
from trainwire_core.auth import Caller
from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError
from trainwire_core.structs import struct_to_dict, to_struct
from trainwire_core.v1 import coordinator_pb2, tune_pb2

pytestmark = pytest.mark.timeout(300)


def _alternatives(sampler: str, *alternatives: tune_pb2.Alternative) -> tune_pb2.Domain:
    return tune_pb2.Domain(sampler=sampler, alternatives=list(alternatives))


def _param(path: list[str], domain: tune_pb2.Domain) -> tune_pb2.SearchParam:
    return tune_pb2.SearchParam(path=path, domain=domain)


def _pickled(label: str, value: object) -> tune_pb2.Alternative:
    return tune_pb2.Alternative(label=label, pickled=cloudpickle.dumps(value))


def _dataset(label: str, uri: str) -> tune_pb2.Alternative:
    return tune_pb2.Alternative(label=label, dataset=coordinator_pb2.DatasetRef(uri=uri))


def _request(trainer: coordinator_pb2.FitRequest, *params: tune_pb2.SearchParam) -> tune_pb2.TuneRequest:
    return tune_pb2.TuneRequest(trainer=trainer, search_space=list(params))


def _torch() -> coordinator_pb2.FitRequest:
    request = coordinator_pb2.FitRequest(framework="torch")
    request.data_parallel.pickled_train_loop_config = cloudpickle.dumps({"a": 1, "nested": {"keep": True}})
    request.datasets["train"].uri = "file:///base.parquet"
    return request


def test_a_trial_gets_its_alternatives_in_place_and_the_rest_of_its_config_as_before():
    request = _request(
        _torch(),
        _param(["train_loop_config", "nested", "f"], _alternatives("choice", _pickled("inc", 1), _pickled("neg", -1))),
        _param(["datasets", "train"], _alternatives("grid_search", _dataset("A", "a"), _dataset("B", "b"))),
    )
    space = SearchSpace(request)
    assert [space.grid_point(k) for k in range(space.num_grid_points)] == [
        {("datasets", "train"): "A"},
        {("datasets", "train"): "B"},
    ]
    config = {"train_loop_config": {"nested": {"f": "neg"}, "lr": 0.1}, "datasets": {"train": "B"}}
    fit = trial_request(request.trainer, config, "t", "k", request.search_space)
    assert fit.datasets["train"].uri == "b"
    # The loop's config is the trainer's with the chosen object merged in, built where it is unpickled.
    assert cloudpickle.loads(fit.data_parallel.pickled_train_loop_config) == {"a": 1, "nested": {"keep": True, "f": -1}}
    assert struct_to_dict(fit.data_parallel.config_overrides) == {"lr": 0.1}
    # The base request is untouched (each trial starts from it).
    assert request.trainer.datasets["train"].uri == "file:///base.parquet"


def test_a_preprocessor_alternative_replaces_the_trainers_own():
    base = coordinator_pb2.FitRequest(framework="xgboost", pickled_preprocessor=b"old")
    base.gbdt.label_column = "y"
    spec = tune_pb2.Alternative(label="scaler", preprocessor=coordinator_pb2.PreprocessorSpec(name="StandardScaler"))
    param = _param(["preprocessor"], _alternatives("grid_search", spec, tune_pb2.Alternative(label="None")))
    request = _request(base, param)
    SearchSpace(request)
    first = trial_request(base, {"preprocessor": "scaler"}, "t", "k", request.search_space)
    assert first.preprocessor.name == "StandardScaler" and not first.pickled_preprocessor
    second = trial_request(base, {"preprocessor": "None"}, "t", "k", request.search_space)
    assert not second.pickled_preprocessor and not second.HasField("preprocessor")
    with pytest.raises(InvalidArgumentError) as err:
        trial_request(base, {"preprocessor": "other"}, "t", "k", request.search_space)
    assert err.value.field == "search_space[0].domain"


@pytest.mark.parametrize(
    ("path", "alternative", "field"),
    [
        (["preprocessor"], _dataset("A", "a"), "search_space[0].domain.alternatives[0]"),
        (["datasets", "train"], _pickled("p", 1), "search_space[0].domain.alternatives[0]"),
        (["scaling_config", "num_workers"], _pickled("p", 1), "search_space[0].path"),
        (["train_loop_config"], _pickled("p", 1), "search_space[0].path"),
        (["datasets"], _dataset("A", "a"), "search_space[0].path"),
    ],
)
def test_alternatives_where_they_cannot_go_are_invalid_argument(path, alternative, field):
    with pytest.raises(InvalidArgumentError) as err:
        SearchSpace(_request(_torch(), _param(path, _alternatives("grid_search", alternative))))
    assert err.value.field == field


def test_labels_must_be_unique_and_alternatives_are_for_grids_and_choices():
    twice = _alternatives("choice", _dataset("A", "a"), _dataset("A", "b"))
    with pytest.raises(InvalidArgumentError, match="label of its own"):
        SearchSpace(_request(_torch(), _param(["datasets", "train"], twice)))
    uniform = tune_pb2.Domain(sampler="uniform", lower=0, upper=1, alternatives=[_dataset("A", "a")])
    with pytest.raises(InvalidArgumentError, match="grid_search and choice"):
        SearchSpace(_request(_torch(), _param(["datasets", "train"], uniform)))


def test_pickled_alternatives_need_submit_code_naming_the_field_and_dataset_refs_do_not():
    gbdt = coordinator_pb2.FitRequest(framework="xgboost")
    submit = Caller("bob", frozenset({"submit", "read"}))
    pickled = _request(gbdt, _param(["preprocessor"], _alternatives("grid_search", _pickled("p", 1))))
    with pytest.raises(PermissionDeniedError, match="submit-code") as err:
        check_access(pickled, submit, allow_pickled_code=True)
    assert err.value.field == "param_space.preprocessor"
    trusted = Caller("alice", frozenset({"submit", "submit-code"}))
    with pytest.raises(PermissionDeniedError) as err:
        check_access(pickled, trusted, allow_pickled_code=False)
    assert err.value.field == "search_space[0].domain.alternatives"
    check_access(pickled, trusted, allow_pickled_code=True)
    refs = _request(gbdt, _param(["datasets", "train"], _alternatives("grid_search", _dataset("A", "a"))))
    check_access(refs, submit, allow_pickled_code=False)


def test_json_domains_are_sampled_as_before():
    values = tune_pb2.Domain(sampler="grid_search", values=to_struct({"v": [1, 2]}, "v")["v"])
    space = SearchSpace(_request(_torch(), _param(["train_loop_config", "lr"], values)))
    assert space.num_grid_points == 2 and space.params[0].values() == [1, 2]


# --- searches on the session's coordinator ---------------------------------------------------------


def _xgb(train_df, valid_df) -> XGBoostTrainer:
    return XGBoostTrainer(
        params={"objective": "binary:logistic", "eval_metric": ["logloss"], "max_depth": 2, "nthread": 1},
        label_column="target",
        num_boost_round=2,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=1),
    )


def test_a_grid_over_preprocessors_applies_each_trials_own(coordinator, cancer_data):
    from ray.data.preprocessors import MinMaxScaler, StandardScaler

    train_df, valid_df = cancer_data
    column = train_df.columns[0]
    grid = Tuner(
        _xgb(train_df, valid_df),
        param_space={
            "preprocessor": tune.grid_search([StandardScaler(columns=[column]), MinMaxScaler(columns=[column])])
        },
        tune_config=TuneConfig(metric="train-logloss", mode="min"),
        run_config=RunConfig(name="grid-over-preprocessors", verbose=0),
    ).fit()
    assert len(grid) == 2 and grid.num_errors == 0
    for result in grid:
        label = result.config["preprocessor"]
        assert label.startswith(("StandardScaler", "MinMaxScaler")), label
        # The checkpoint holds the trial's own preprocessor, fitted on its data.
        fitted = result.checkpoint.get_preprocessor()
        assert type(fitted).__name__ == label.split("(")[0]
        stat = f"mean({column})" if label.startswith("Standard") else f"max({column})"
        expected = train_df[column].mean() if label.startswith("Standard") else train_df[column].max()
        assert fitted.stats_[stat] == pytest.approx(expected)
    df = grid.get_dataframe()
    assert sorted(df["config/preprocessor"].str.split("(").str[0]) == ["MinMaxScaler", "StandardScaler"]


def test_a_grid_over_datasets_trains_each_trial_on_its_own(coordinator, cancer_data):
    train_df, valid_df = cancer_data
    constant = train_df.assign(target=0)  # labels all of one class: a far lower logloss
    grid = Tuner(
        _xgb(train_df, valid_df),
        param_space={"datasets": {"train": tune.grid_search([train_df, constant])}},
        tune_config=TuneConfig(metric="train-logloss", mode="min"),
        run_config=RunConfig(name="grid-over-datasets", verbose=0),
    ).fit()
    assert len(grid) == 2 and grid.num_errors == 0
    df = grid.get_dataframe().set_index("config/datasets/train")
    assert sorted(df.index) == ["<DataFrame #0>", "<DataFrame #1>"]
    assert df.loc["<DataFrame #1>", "train-logloss"] < df.loc["<DataFrame #0>", "train-logloss"] / 2
    # The valid set is the trainer's own in both.
    assert df["valid-logloss"].notna().all()


def _offset(x):
    return x + 100


def _scale(x):
    return x * 10


def _apply(config):
    tune.report({"y": config["f"](config["x"])})


def test_a_grid_over_callables_in_a_function_trainables_config(coordinator):
    grid = Tuner(
        _apply,
        param_space={"f": tune.grid_search([_offset, _scale]), "x": 3},
        tune_config=TuneConfig(metric="y", mode="max"),
        run_config=RunConfig(name="grid-over-functions", verbose=0),
    ).fit()
    assert len(grid) == 2 and grid.num_errors == 0
    by_label = {r.config["f"]: r.metrics["y"] for r in grid}
    assert sorted(by_label.values()) == [30, 103]
    assert {label.split(" ")[1] for label in by_label} == {"_offset", "_scale"}
    df = grid.get_dataframe()
    assert sorted(df["config/f"]) == sorted(by_label)


def test_every_dataset_alternative_is_checked_before_the_search_is_recorded(coordinator, cancer_data, tmp_path):
    train_df, _ = cancer_data
    trainer = XGBoostTrainer(
        params={"objective": "binary:logistic"}, label_column="target", datasets={"train": train_df}
    )
    missing = f"file://{tmp_path}/missing.parquet"
    tuner = Tuner(
        trainer,
        param_space={"datasets": {"train": tune.grid_search([train_df, missing])}},
        run_config=RunConfig(name="grid-over-a-missing-dataset", verbose=0),
    )
    with pytest.raises(InvalidArgumentError) as err:
        tuner.fit()
    assert err.value.field == "search_space[0].domain.alternatives[1]"
    assert err.value.message.startswith(f"param_space.datasets.train: alternative {missing!r}: ")
