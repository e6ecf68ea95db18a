"""grid_search and choice over objects (preprocessors, datasets, functions): how the SDK carries them."""

from __future__ import annotations

import cloudpickle
import pandas as pd
import pytest

from trainwire import tune
from trainwire.torch import TorchTrainer
from trainwire.tune import Tuner
from trainwire.tune.search.sample import labels
from trainwire.tune.tuner import parse_param_space, search_params
from trainwire.xgboost import XGBoostTrainer
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import coordinator_pb2, tune_pb2


class Scale:
    """A stand-in preprocessor: any picklable object."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __repr__(self) -> str:
        return f"Scale({self.factor})"


def double(x):
    return 2 * x


def square(x):
    return x * x


def _loop(config):
    pass


def _gbdt() -> XGBoostTrainer:
    return XGBoostTrainer(params={"eta": 0.3}, label_column="y", datasets={"train": "file:///data.parquet"})


def _domains(space, trainer, convert=None) -> dict[tuple[str, ...], tune_pb2.Domain]:
    _, params = parse_param_space(space, trainer)
    return {tuple(p.path): p.domain for p in search_params(params, convert)}


def test_a_grid_over_preprocessors_carries_each_pickled_by_value_with_its_repr():
    domain = _domains({"preprocessor": tune.grid_search([Scale(1), Scale(2)])}, _gbdt())[("preprocessor",)]
    assert domain.sampler == "grid_search" and not domain.values.values
    assert [a.label for a in domain.alternatives] == ["Scale(1)", "Scale(2)"]
    # By value: the class of this test module travels with it (the cluster cannot import it).
    restored = [cloudpickle.loads(a.pickled) for a in domain.alternatives]
    assert [type(p).__name__ for p in restored] == ["Scale", "Scale"] and [p.factor for p in restored] == [1, 2]


def test_callables_inside_train_loop_config_travel_as_pickled_alternatives_and_json_stays_json():
    trainer = TorchTrainer(_loop, train_loop_config={"lr": 0.1})
    domains = _domains(
        {"train_loop_config": {"f": tune.choice([double, square]), "lr": tune.grid_search([0.1, 0.2])}}, trainer
    )
    f = domains[("train_loop_config", "f")]
    assert f.sampler == "choice" and len(f.alternatives) == 2
    assert [cloudpickle.loads(a.pickled)(3) for a in f.alternatives] == [6, 9]
    assert all(a.label.startswith("<function") for a in f.alternatives)
    lr = domains[("train_loop_config", "lr")]  # a JSON grid is carried as before
    assert list(lr.values) == [0.1, 0.2] and not lr.alternatives


def test_datasets_are_converted_as_the_trainer_converts_its_own():
    seen = []

    def convert(path, value):
        seen.append(path)
        return tune_pb2.Alternative(dataset=coordinator_pb2.DatasetRef(uri=value))

    space = {"datasets": {"train": tune.grid_search(["file:///a.parquet", "file:///b.parquet"])}}
    domain = _domains(space, _gbdt(), convert)[("datasets", "train")]
    assert [a.dataset.uri for a in domain.alternatives] == ["file:///a.parquet", "file:///b.parquet"]
    assert seen == [("datasets", "train")] * 2


def test_the_tuners_converter_uploads_frames_and_keeps_uris():
    class FakeClient:
        def upload_table(self, table):
            class Uploaded:
                ref = coordinator_pb2.DatasetRef(uri=f"datasets/{table.num_rows}")

            return Uploaded()

    tuner = Tuner(_gbdt(), param_space={"datasets": {"train": tune.grid_search([pd.DataFrame({"y": [1, 2]}), "x"])}})
    convert = Tuner._converter(tuner.trainable, FakeClient())
    _, params = parse_param_space(tuner.param_space, tuner.trainable)
    domain = search_params(params, convert)[0].domain
    assert [a.dataset.uri for a in domain.alternatives] == ["datasets/2", "x"]
    assert [a.label for a in domain.alternatives] == ["<DataFrame #0>", "x"]
    assert Tuner._converter(tuner.trainable, FakeClient())(("preprocessor",), None) == tune_pb2.Alternative()


def test_labels_are_short_and_unique():
    uri, long = "s3://bucket/a.parquet", "x" * 300
    assert labels([Scale(1), Scale(1), long, None, uri]) == ["<Scale #0>", "<Scale #1>", "<str #2>", "None", uri]


@pytest.mark.parametrize(
    ("space", "field"),
    [
        ({"params": {"booster": tune.grid_search([Scale(1), Scale(2)])}}, "param_space.params.booster"),
        ({"preprocessor": Scale(1)}, "param_space.preprocessor"),
        ({"preprocessor": tune.uniform(0, 1)}, "param_space.preprocessor"),
        ({"datasets": {"train": "file:///c.parquet"}}, "param_space.datasets"),
    ],
)
def test_objects_where_they_cannot_go_are_refused_naming_the_field(space, field):
    with pytest.raises(InvalidArgumentError) as err:
        _domains(space, _gbdt())
    assert err.value.field == field


def test_an_object_that_cannot_be_pickled_names_its_field():
    import threading

    trainer = TorchTrainer(_loop)
    with pytest.raises(InvalidArgumentError) as err:
        _domains({"train_loop_config": {"lock": tune.grid_search([threading.Lock(), 1])}}, trainer)
    assert err.value.field == "param_space.train_loop_config.lock"
