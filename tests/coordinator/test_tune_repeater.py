"""Repeater as Ray's: each suggestion runs ``repeat`` times, and the searcher is told each group's mean once.

The coordinator's wrapper is driven with a recording searcher and with OptunaSearch's study; one
search runs end to end through a Tuner.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from trainwire.tune.search import (
    UNDEFINED_METRIC_MODE,
    UNDEFINED_SEARCH_SPACE,
    UNRESOLVED_SEARCH_SPACE,
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    SearchGenerator,
)
from trainwire_coordinator.tune import searchers
from trainwire_coordinator.tune.searchers import RepeatSearcher, Searcher, make_searcher
from trainwire_coordinator.tune.space import SearchSpace
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import tune_pb2


class Recording(Searcher):
    """Suggests ``{("x",): group}`` and records what it is told."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.asked: list[int] = []
        self.told: list[tuple[int, dict, float | None, bool]] = []

    def suggest(self, index: int) -> dict | None:
        self.asked.append(index)
        return {("x",): float(index)}

    def on_complete(self, index: int, values: dict, value: float | None, result: Any = None, error: bool = False):
        self.told.append((index, values, value, error))


def test_groups_share_a_config_and_the_searcher_gets_each_groups_mean_once() -> None:
    inner = Recording(total=7)
    rep = RepeatSearcher(inner, 3, ("__trial_index__",))
    suggested = [rep.suggest(i) for i in range(8)]
    assert suggested[7] is None  # the total counts every trial
    assert inner.asked == [0, 1, 2]  # once per group
    assert [s[("x",)] for s in suggested[:7]] == [0, 0, 0, 1, 1, 1, 2]
    assert [s[("__trial_index__",)] for s in suggested[:7]] == [0, 1, 2, 0, 1, 2, 0]
    # Ended out of order; a trial without the metric (NaN) is left out of the mean, as np.nanmean.
    for index, value in [(4, 2.0), (0, 1.0), (3, 4.0), (1, None), (2, 5.0), (6, 9.0)]:
        rep.on_complete(index, suggested[index], value)
        if index == 2:
            assert inner.told == [(0, {("x",): 0.0}, 3.0, False)]
    assert inner.told == [(0, {("x",): 0.0}, 3.0, False)]  # group 1 has not ended yet
    rep.on_complete(5, suggested[5], 6.0)
    rep.on_complete(5, suggested[5], 6.0)  # told again (a retried trial): not told twice
    assert inner.told[1:] == [(1, {("x",): 1.0}, 4.0, False)]
    # The last, partial group (6) is never told, as in Ray.
    assert len(inner.told) == 2


def test_a_group_that_all_failed_is_told_as_failed_and_a_taken_over_group_keeps_its_config() -> None:
    inner = Recording(total=None)
    rep = RepeatSearcher(inner, 2, None)
    rep.known(0, {("x",): 7.0})  # a previous coordinator started group 0 with this config
    assert rep.suggest(1) == {("x",): 7.0} and inner.asked == []
    rep.on_complete(0, {("x",): 7.0}, None, error=True)
    rep.on_complete(1, {("x",): 7.0}, None, error=True)
    assert inner.told == [(0, {("x",): 7.0}, None, True)]


def _request(alg: tune_pb2.SearchAlgorithm, num_samples: int) -> tune_pb2.TuneRequest:
    request = tune_pb2.TuneRequest(function_trainable=True)
    request.trainer.framework = "torch"
    request.trainer.data_parallel.SetInParent()
    param = request.search_space.add(path=["train_loop_config", "x"])
    param.domain.sampler, param.domain.lower, param.domain.upper = "uniform", 0.0, 1.0
    request.tune_config.search_alg.CopyFrom(alg)
    request.tune_config.num_samples = num_samples
    return request


def test_optuna_behind_a_repeater_learns_each_groups_mean() -> None:
    pytest.importorskip("optuna")
    alg = tune_pb2.SearchAlgorithm(name="optuna", seed=5, repeat=3)
    request = _request(alg, 6)
    rep = make_searcher(request, SearchSpace(request), "min")
    assert isinstance(rep, RepeatSearcher)
    values = [rep.suggest(i) for i in range(6)]
    for i, v in enumerate(values):
        assert v[("train_loop_config", "__trial_index__")] == i % 3
        rep.on_complete(i, v, v[("train_loop_config", "x")] + i % 3)
    trials = rep.inner.study.trials
    assert [t.params["train_loop_config/x"] for t in trials] == [values[0][("train_loop_config", "x")]] + [
        values[3][("train_loop_config", "x")]
    ]
    assert [t.value for t in trials] == pytest.approx([t.params["train_loop_config/x"] + 1 for t in trials])


def test_the_client_sends_repeat_and_set_index_and_wrappers_nest() -> None:
    msg = ConcurrencyLimiter(Repeater(SearchGenerator(BasicVariantGenerator(random_state=1)), 4, False), 2).to_proto()
    assert (msg.name, msg.seed, msg.repeat, msg.repeat_without_index, msg.max_concurrent) == (
        "variant_generator",
        1,
        4,
        True,
        2,
    )
    assert Repeater(BasicVariantGenerator()).to_proto().repeat == 1
    with pytest.raises(InvalidArgumentError) as err:
        Repeater(BasicVariantGenerator(), repeat=0)
    assert err.value.field == "search_alg.repeat"
    with pytest.raises(InvalidArgumentError):
        Repeater(ConcurrencyLimiter(Repeater(BasicVariantGenerator(), 2), 1), 2)
    # Ray's messages, word for word.
    import ray.tune.search as ray_search

    assert UNDEFINED_METRIC_MODE == ray_search.UNDEFINED_METRIC_MODE
    assert UNDEFINED_SEARCH_SPACE == ray_search.UNDEFINED_SEARCH_SPACE
    assert UNRESOLVED_SEARCH_SPACE == ray_search.UNRESOLVED_SEARCH_SPACE


def _train(config: dict[str, Any]) -> None:
    from trainwire import tune

    tune.report({"score": config["x"] + config["__trial_index__"]})


@pytest.mark.timeout(300)
def test_a_repeated_search_runs_through_a_tuner(coordinator, monkeypatch) -> None:
    from trainwire import RunConfig, tune
    from trainwire.tune import TuneConfig, Tuner

    told: list[tuple[int, float | None]] = []
    original = searchers.VariantGenerator.on_complete

    def record(self: Any, index: int, values: Any, value: float | None, *args: Any, **kwargs: Any) -> None:
        told.append((index, value))
        original(self, index, values, value, *args, **kwargs)

    # The coordinator runs in this process: its random searcher records what it is told.
    monkeypatch.setattr(searchers.VariantGenerator, "on_complete", record)
    grid = Tuner(
        _train,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=TuneConfig(
            search_alg=Repeater(BasicVariantGenerator(random_state=3), repeat=3),
            num_samples=6,
            metric="score",
            mode="max",
        ),
        run_config=RunConfig(name="repeater", verbose=0),
    ).fit()
    assert len(grid) == 6 and grid.num_errors == 0
    groups: dict[float, list[int]] = {}
    for result in grid:
        groups.setdefault(result.config["x"], []).append(result.config["__trial_index__"])
    assert len(groups) == 2 and all(sorted(g) == [0, 1, 2] for g in groups.values())
    assert sorted(i for i, _ in told) == [0, 1]
    assert sorted(v for _, v in told) == pytest.approx(sorted(x + 1 for x in groups))
    assert all(not math.isnan(v) for _, v in told)
