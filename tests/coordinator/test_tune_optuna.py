"""OptunaSearch as Ray's: define-by-run spaces and multi-objective searches suggest what Ray's suggests.

The coordinator's searcher and Ray 2.60's OptunaSearch are fed one sequence of results; with the
same seed they suggest the same configs. One search runs end to end through a Tuner: the
define-by-run function travels pickled and runs in the search's actor.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from trainwire_coordinator.tune.searchers import OptunaSearcher, SearcherHost, make_searcher
from trainwire_coordinator.tune.space import SearchSpace, nest
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2

pytest.importorskip("optuna")


def define_by_run(trial: Any) -> dict[str, Any]:
    """Conditional parameters and a returned constant, as Ray's define-by-run example."""
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    kind = trial.suggest_categorical("kind", ["wide", "deep"])
    if kind == "deep":
        trial.suggest_int("layers", 2, 6)
    return {"batch": 32}


def objective(config: dict[str, Any]) -> dict[str, float]:
    """Two metrics of a config (loss to minimize, speed to maximize)."""
    loss = (math.log10(config["lr"]) + 2.5) ** 2 + (0.3 if config["kind"] == "wide" else 0.05 * config["layers"])
    return {"loss": loss, "speed": 1.0 / (1 + config.get("layers", 1)) + config["lr"]}


def _request(alg: tune_pb2.SearchAlgorithm, search_space: list[tune_pb2.SearchParam] = ()) -> tune_pb2.TuneRequest:
    request = tune_pb2.TuneRequest(search_space=search_space, function_trainable=True)
    request.trainer.framework = "torch"
    request.trainer.data_parallel.SetInParent()
    request.tune_config.search_alg.CopyFrom(alg)
    request.tune_config.num_samples = 14
    return request


def _ray_run(searcher: Any, n: int) -> list[dict[str, Any]]:
    configs = []
    for i in range(n):
        config = searcher.suggest(f"t{i}")
        configs.append(config)
        searcher.on_trial_complete(f"t{i}", objective(config))
    return configs


def _our_run(searcher: OptunaSearcher, n: int, metric: str = "") -> list[dict[str, Any]]:
    configs = []
    for i in range(n):
        values = searcher.suggest(i)
        assert values is not None
        config = nest(values)["train_loop_config"]
        configs.append(config)
        result = objective(config)
        searcher.on_complete(i, values, result.get(metric), result=result)
    return configs


@pytest.mark.parametrize("seed", [3, 11])
def test_a_define_by_run_space_suggests_what_rays_suggests(seed: int) -> None:
    from ray.tune.search.optuna import OptunaSearch

    ray_configs = _ray_run(OptunaSearch(space=define_by_run, metric="loss", mode="min", seed=seed), 14)
    alg = tune_pb2.SearchAlgorithm(name="optuna", seed=seed)
    ours = OptunaSearcher(SearchSpace(_request(alg)), 14, alg, "min", define_by_run, ("train_loop_config",))
    our_configs = _our_run(ours, 14, "loss")
    assert our_configs == ray_configs
    # The conditional parameter appears only where its branch was taken, the constant everywhere.
    assert {("layers" in c) for c in our_configs} == {True, False}
    assert all(c["batch"] == 32 for c in our_configs)


def test_a_multi_objective_search_suggests_what_rays_suggests() -> None:
    from ray import tune as ray_tune
    from ray.tune.search.optuna import OptunaSearch

    ray_space = {
        "lr": ray_tune.loguniform(1e-4, 1e-1),
        "kind": ray_tune.choice(["wide", "deep"]),
        "layers": ray_tune.randint(2, 7),
    }
    params = [
        tune_pb2.SearchParam(
            path=["train_loop_config", "lr"], domain=tune_pb2.Domain(sampler="loguniform", lower=1e-4, upper=1e-1)
        ),
        tune_pb2.SearchParam(path=["train_loop_config", "kind"], domain=_choice(["wide", "deep"])),
        tune_pb2.SearchParam(
            path=["train_loop_config", "layers"], domain=tune_pb2.Domain(sampler="randint", lower=2, upper=7)
        ),
    ]
    alg = tune_pb2.SearchAlgorithm(name="optuna", seed=5, metrics=["loss", "speed"], modes=["min", "max"])
    request = _request(alg, params)
    # The space's names are Ray's flattened ones (train_loop_config/lr), so Ray's space is keyed alike.
    ray_searcher = OptunaSearch(
        space={"train_loop_config": ray_space}, metric=["loss", "speed"], mode=["min", "max"], seed=5
    )
    ray_configs = [c["train_loop_config"] for c in _ray_run_nested(ray_searcher, 14)]
    ours = make_searcher(request, SearchSpace(request), "")
    assert isinstance(ours, OptunaSearcher)
    our_configs = _our_run(ours, 14)
    assert our_configs == ray_configs
    # Both objectives were told: the study's Pareto front is made of completed trials.
    assert ours.study.directions[1].name == "MAXIMIZE" and ours.study.best_trials


def _ray_run_nested(searcher: Any, n: int) -> list[dict[str, Any]]:
    configs = []
    for i in range(n):
        config = searcher.suggest(f"t{i}")
        configs.append(config)
        searcher.on_trial_complete(f"t{i}", objective(config["train_loop_config"]))
    return configs


def _choice(values: list[Any]) -> tune_pb2.Domain:
    domain = tune_pb2.Domain(sampler="choice")
    domain.values.extend(values)
    return domain


def test_the_host_answers_json_and_rays_errors_for_a_bad_return() -> None:
    import cloudpickle

    def bad(trial: Any) -> list[int]:
        trial.suggest_float("x", 0, 1)
        return [1]

    alg = tune_pb2.SearchAlgorithm(name="optuna", seed=1, pickled_space=cloudpickle.dumps(bad))
    host = SearcherHost(_request(alg).SerializeToString(), "min")
    answer = host.suggest(0)
    assert "should be either None or a `dict` with `str` keys" in answer and "TypeError" in answer


@pytest.mark.parametrize(
    ("alg", "field"),
    [
        (tune_pb2.SearchAlgorithm(name="optuna", metrics=["a", "b"], modes=["min"]), "tune_config.search_alg.modes"),
        (tune_pb2.SearchAlgorithm(name="optuna", metrics=["a"], modes=["up"]), "tune_config.search_alg.modes[0]"),
        (
            tune_pb2.SearchAlgorithm(name="variant_generator", metrics=["a"], modes=["min"]),
            "tune_config.search_alg.metrics",
        ),
        (
            tune_pb2.SearchAlgorithm(name="variant_generator", pickled_space=b"x"),
            "tune_config.search_alg.pickled_space",
        ),
    ],
)
def test_bad_objectives_and_spaces_are_invalid_argument_naming_the_field(
    alg: tune_pb2.SearchAlgorithm, field: str
) -> None:
    request = _request(alg)
    with pytest.raises(InvalidArgumentError) as info:
        make_searcher(request, SearchSpace(request), "min")
    assert info.value.field == field


def test_a_define_by_run_space_with_searched_param_space_is_refused_as_in_ray() -> None:
    param = tune_pb2.SearchParam(path=["train_loop_config", "x"], domain=tune_pb2.Domain(sampler="uniform", upper=1))
    request = _request(tune_pb2.SearchAlgorithm(name="optuna", pickled_space=b"code"), [param])
    with pytest.raises(InvalidArgumentError, match="already instantiated with a search space") as info:
        make_searcher(request, SearchSpace(request), "min")
    assert info.value.field == "search_space[0]"


def test_a_define_by_run_space_needs_the_submit_code_scope() -> None:
    from trainwire_coordinator.tune.checks import check_access
    from trainwire_core.auth import Caller
    from trainwire_core.errors import PermissionDeniedError

    request = _request(tune_pb2.SearchAlgorithm(name="optuna", pickled_space=b"code"))
    with pytest.raises(PermissionDeniedError, match="submit-code"):
        check_access(request, Caller("mallory", frozenset({"submit"})), allow_pickled_code=True)
    trusted = Caller("alice", frozenset({"submit", "submit-code"}))
    with pytest.raises(PermissionDeniedError) as info:
        check_access(request, trusted, allow_pickled_code=False)
    assert info.value.field == "tune_config.search_alg.pickled_space"
    check_access(request, trusted, allow_pickled_code=True)


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def _train(config: dict[str, Any]) -> None:
    from trainwire import tune

    tune.report(objective(config))


@pytest.mark.timeout(300)
def test_a_define_by_run_multi_objective_search_runs_through_a_tuner(coordinator) -> None:
    from ray.tune.search.optuna import OptunaSearch as RayOptunaSearch

    from trainwire import RunConfig
    from trainwire.tune import TuneConfig, Tuner
    from trainwire.tune.search.optuna import OptunaSearch

    searcher = OptunaSearch(space=define_by_run, metric=["loss", "speed"], mode=["min", "max"], seed=9)
    grid = Tuner(
        _train,
        tune_config=TuneConfig(search_alg=searcher, num_samples=4, metric="loss", mode="min"),
        run_config=RunConfig(name="optuna-define-by-run", verbose=0),
    ).fit()
    assert len(grid) == 4 and grid.num_errors == 0
    # TPE's first trials are drawn from the seed alone: the same as Ray's, whatever order trials end in.
    ray_searcher = RayOptunaSearch(space=define_by_run, metric=["loss", "speed"], mode=["min", "max"], seed=9)
    expected = [ray_searcher.suggest(f"t{i}") for i in range(4)]
    assert sorted(map(_key, (r.config for r in grid))) == sorted(map(_key, expected))
    best = grid.get_best_result()
    assert best.metrics["loss"] == min(r.metrics["loss"] for r in grid)


def test_points_to_evaluate_come_first_in_a_define_by_run_space_as_in_ray() -> None:
    from google.protobuf import struct_pb2
    from ray.tune.search.optuna import OptunaSearch

    point = {"lr": 0.01, "kind": "deep", "layers": 3}
    ray_searcher = OptunaSearch(space=define_by_run, metric="loss", mode="min", seed=2, points_to_evaluate=[point])
    expected = _ray_run(ray_searcher, 3)
    # A function trainable's points travel keyed like its trainer's param_space.
    nested = struct_pb2.Struct()
    nested.update({"train_loop_config": point})
    alg = tune_pb2.SearchAlgorithm(name="optuna", seed=2, points_to_evaluate=[nested])
    ours = OptunaSearcher(SearchSpace(_request(alg)), 3, alg, "min", define_by_run, ("train_loop_config",))
    assert _our_run(ours, 3, "loss") == expected
    assert expected[0] == {**point, "batch": 32}
