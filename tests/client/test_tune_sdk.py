"""The ``trainwire.tune`` SDK without a server: request building, samplers, ResultGrid, the CLI."""

from __future__ import annotations

import cloudpickle
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwire import RunConfig, ScalingConfig, cli, tune
from trainwire.trainer import DataParallelTrainer
from trainwire.tune import TuneConfig, Tuner
from trainwire.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler, FIFOScheduler
from trainwire.tune.search import BasicVariantGenerator, ConcurrencyLimiter
from trainwire.tune.search.optuna import OptunaSearch
from trainwire.tune.search.sample import Domain
from trainwire.tune.search.variant_generator import join_space, split_space
from trainwire.tune.tuner import parse_param_space, search_params
from trainwire.xgboost import XGBoostTrainer
from trainwire_core.errors import InvalidArgumentError, TrainingFailedError
from trainwire_core.structs import metrics_to_struct, to_struct
from trainwire_core.v1 import common_pb2, coordinator_pb2, tune_pb2


def loop(config: dict) -> None:
    pass


def torch_like() -> DataParallelTrainer:
    return DataParallelTrainer(loop, train_loop_config={"epochs": 1}, scaling_config=ScalingConfig(num_workers=1))


def gbdt() -> XGBoostTrainer:
    return XGBoostTrainer(params={"eta": 0.3}, label_column="y", datasets={"train": "file:///data.parquet"})


# --- param_space -> request ---------------------------------------------------------------------------
def test_samplers_become_search_params_and_the_rest_stays_constant():
    constants, params = parse_param_space(
        {
            "train_loop_config": {
                "lr": tune.loguniform(1e-4, 1e-1),
                "epochs": 3,
                "opt": {"name": "adam", "beta": tune.uniform(0.8, 0.99)},
                "layers": [64, 32],
                "batch": tune.grid_search([16, 32]),
                "width": {"grid_search": [1, 2, 3]},
            },
        },
        torch_like(),
    )
    assert constants == {"train_loop_config": {"epochs": 3, "opt": {"name": "adam"}, "layers": [64, 32]}}
    protos = {tuple(p.path): p.domain for p in search_params(params)}
    assert set(protos) == {
        ("train_loop_config", "lr"),
        ("train_loop_config", "opt", "beta"),
        ("train_loop_config", "batch"),
        ("train_loop_config", "width"),
    }
    lr = protos["train_loop_config", "lr"]
    assert (lr.sampler, lr.lower, lr.upper, lr.base) == ("loguniform", 1e-4, 1e-1, 10)
    assert protos["train_loop_config", "batch"].sampler == "grid_search"
    assert list(protos["train_loop_config", "width"].values) == [1, 2, 3]


def test_scaling_config_object_and_dict_with_samplers():
    constants, _ = parse_param_space({"scaling_config": ScalingConfig(num_workers=(1, 4), use_gpu=True)})
    assert constants["scaling_config"] == {
        "num_workers": 4,
        "min_workers": 1,
        "use_gpu": True,
        "placement_strategy": "PACK",
    }
    constants, _ = parse_param_space({"scaling_config": ScalingConfig(num_workers=2)})
    assert constants["scaling_config"]["min_workers"] == 0
    constants, params = parse_param_space(
        {"scaling_config": {"num_workers": tune.grid_search([1, 2]), "use_gpu": False}}
    )
    assert constants == {"scaling_config": {"use_gpu": False}}
    assert [p for p, _ in params] == [("scaling_config", "num_workers")]


def test_search_domains_in_a_scaling_config_object_are_kept_for_the_search():
    """As Ray: ``ScalingConfig(num_workers=tune.grid_search([1, 2]))`` is built, and a Tuner resolves it per trial."""
    searched = ScalingConfig(num_workers=tune.grid_search([1, 2]), resources_per_worker={"CPU": tune.choice([1, 2])})
    assert searched.searched_fields == ["num_workers", "resources_per_worker"]
    constants, params = parse_param_space({"scaling_config": searched})
    assert constants == {"scaling_config": {"use_gpu": False, "placement_strategy": "PACK", "min_workers": 0}}
    assert [p for p, _ in params] == [
        ("scaling_config", "num_workers"),
        ("scaling_config", "resources_per_worker", "CPU"),
    ]
    # Ray's dict form of a grid, and a plain value beside a searched one.
    constants, params = parse_param_space(
        {"scaling_config": ScalingConfig(num_workers=3, use_gpu={"grid_search": [False, True]})}
    )
    assert constants["scaling_config"]["num_workers"] == 3
    assert [p for p, _ in params] == [("scaling_config", "use_gpu")]
    # Outside a Tuner nothing resolves it: the trainer's request names the field.
    with pytest.raises(InvalidArgumentError) as err:
        searched.to_proto()
    assert err.value.field == "scaling_config.num_workers"
    # Values that are not domains are still checked when the config is built.
    with pytest.raises(InvalidArgumentError):
        ScalingConfig(num_workers=-1)


def test_gbdt_params_and_num_boost_round():
    constants, params = parse_param_space(
        {"params": {"eta": tune.uniform(0.01, 0.3), "max_depth": tune.randint(2, 8)}, "num_boost_round": 20}, gbdt()
    )
    assert constants == {"num_boost_round": 20}
    assert sorted(p for p, _ in params) == [("params", "eta"), ("params", "max_depth")]


@pytest.mark.parametrize(
    ("space", "field"),
    [
        ({"datasets": {"train": "x"}}, "param_space.datasets"),
        ({"lr": tune.uniform(0, 1)}, "param_space.lr"),
        ({"params": {"eta": 0.1}}, "param_space.params"),  # a DataParallelTrainer has no params
        ({"train_loop_config": {"f": object()}}, "param_space.train_loop_config.f"),
        ({"train_loop_config": {"x": float("nan")}}, "param_space.train_loop_config.x"),
        ({"train_loop_config": {"l": [tune.uniform(0, 1)]}}, "param_space.train_loop_config.l"),
        ({"train_loop_config": {"g": {"grid_search": []}}}, "param_space.train_loop_config.g"),
        ({"scaling_config": {"workers": 2}}, "param_space.scaling_config.workers"),
        ({"scaling_config": 3}, "param_space.scaling_config"),
    ],
)
def test_bad_param_spaces_name_their_field(space, field):
    with pytest.raises(InvalidArgumentError) as err:
        Tuner(torch_like(), param_space=space)
    assert err.value.field == field


def test_a_function_trainable_becomes_a_one_worker_loop_whose_config_is_the_param_space():
    from trainwire import tune

    tuner = Tuner(
        tune.with_resources(loop, {"cpu": 2, "GPU": 0}),
        param_space={"lr": tune.uniform(0.1, 1.0), "epochs": 3},
        tune_config=TuneConfig(search_alg=tune.search.BasicVariantGenerator(points_to_evaluate=[{"lr": 0.5}])),
    )
    assert tuner.function_trainable
    assert tuner.trainable.scaling_config.num_workers == 1
    assert tuner.trainable.scaling_config.resources_per_worker == {"CPU": 2.0, "GPU": 0.0}
    assert tuner._constants == {"train_loop_config": {"epochs": 3}}
    assert [path for path, _ in tuner._params] == [("train_loop_config", "lr")]
    assert tuner.tune_config.search_alg.points_to_evaluate == [{"train_loop_config": {"lr": 0.5}}]


def test_tuner_rejects_what_is_neither_a_trainer_nor_a_function():
    with pytest.raises(InvalidArgumentError) as err:
        Tuner(42)
    assert err.value.field == "trainable"


class UploadingClient:
    """What a trainer's build_request calls when it has nothing to upload."""

    address = "localhost:1"

    def upload_package(self, data: bytes) -> coordinator_pb2.PackageInfo:
        return coordinator_pb2.PackageInfo(sha256="0" * 64)


def test_build_request_uses_the_tuners_run_config_and_name(monkeypatch):
    trainer = DataParallelTrainer("pkg.mod:loop", run_config=RunConfig(name="trainer-name", verbose=0))
    tuner = Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": tune.choice([0.1, 0.01]), "epochs": 2}},
        tune_config=TuneConfig(
            metric="loss",
            mode="min",
            num_samples=8,
            max_concurrent_trials=2,
            scheduler=ASHAScheduler(max_t=10, grace_period=2),
            search_alg=ConcurrencyLimiter(OptunaSearch(seed=7), max_concurrent=3),
        ),
        run_config=RunConfig(name="search", stop={"training_iteration": 5}, verbose=0),
    )
    monkeypatch.setitem(__import__("trainwire.session_client").session_client.settings, "runtime_env", None)
    request = tuner.build_request(UploadingClient())
    assert request.name == "search" and request.trainer.run_config.name == ""
    assert dict(request.trainer.run_config.stop) == {"training_iteration": 5}
    assert json_format.MessageToDict(request.param_space) == {"train_loop_config": {"epochs": 2}}
    assert [list(p.path) for p in request.search_space] == [["train_loop_config", "lr"]]
    config = request.tune_config
    assert (config.metric, config.mode, config.num_samples, config.max_concurrent_trials) == ("loss", "min", 8, 2)
    assert (config.scheduler.name, config.scheduler.max_t, config.scheduler.grace_period) == ("asha", 10, 2)
    assert (config.scheduler.reduction_factor, config.scheduler.time_attr) == (4, "training_iteration")
    assert (config.search_alg.name, config.search_alg.seed, config.search_alg.max_concurrent) == ("optuna", 7, 3)
    assert request.idempotency_key
    assert request.idempotency_key != tuner.build_request(UploadingClient()).idempotency_key


def test_optuna_space_joins_the_param_space():
    search = OptunaSearch(space={"train_loop_config": {"lr": tune.uniform(0, 1)}}, metric="loss", mode="min")
    tuner = Tuner(
        torch_like(), param_space={"train_loop_config": {"epochs": 2}}, tune_config=TuneConfig(search_alg=search)
    )
    assert [p for p, _ in tuner._params] == [("train_loop_config", "lr")]
    with pytest.raises(InvalidArgumentError) as err:
        Tuner(
            torch_like(),
            param_space={"train_loop_config": {"lr": tune.uniform(0, 1)}},
            tune_config=TuneConfig(search_alg=search),
        )
    assert err.value.field == "param_space.train_loop_config.lr"


def test_search_algorithms_and_schedulers():
    with pytest.raises(InvalidArgumentError) as err:
        OptunaSearch(sampler=object())
    assert err.value.field == "search_alg.sampler" and "TPE" in err.value.message
    basic = BasicVariantGenerator(points_to_evaluate=[{"train_loop_config": {"lr": 0.1}}], random_state=3)
    msg = basic.to_proto()
    assert (msg.name, msg.seed, msg.max_concurrent) == ("variant_generator", 3, 0)
    assert json_format.MessageToDict(msg.points_to_evaluate[0]) == {"train_loop_config": {"lr": 0.1}}
    assert ConcurrencyLimiter(basic, 4).to_proto().max_concurrent == 4
    assert AsyncHyperBandScheduler is ASHAScheduler and FIFOScheduler().to_proto().name == "fifo"
    for bad in ({"grace_period": 200}, {"reduction_factor": 1}, {"mode": "best"}, {"brackets": 0}):
        with pytest.raises(InvalidArgumentError):
            ASHAScheduler(**bad)
    with pytest.raises(InvalidArgumentError) as err:
        TuneConfig(metric="loss", scheduler=ASHAScheduler(metric="acc"))
    assert err.value.field == "tune_config.scheduler.metric"
    for bad in ({"mode": "lowest"}, {"num_samples": 0}, {"num_samples": -1}, {"time_budget_s": -1}):
        with pytest.raises(InvalidArgumentError):
            TuneConfig(**bad)
    assert TuneConfig(num_samples=-1, time_budget_s=60, reuse_actors=True).to_proto().time_budget_s == 60


# --- samplers --------------------------------------------------------------------------------------
def test_sampler_protos():
    cases = [
        (tune.uniform(1, 2), {"sampler": "uniform", "lower": 1, "upper": 2}),
        (tune.quniform(0, 1, 0.1), {"sampler": "quniform", "upper": 1, "q": 0.1}),
        (tune.qloguniform(1e-3, 1, 1e-3), {"sampler": "qloguniform", "lower": 1e-3, "upper": 1, "q": 1e-3, "base": 10}),
        (tune.randint(0, 10), {"sampler": "randint", "upper": 10}),
        (tune.qrandint(0, 10, 2), {"sampler": "qrandint", "upper": 10, "q": 2}),
        (tune.lograndint(1, 100), {"sampler": "lograndint", "lower": 1, "upper": 100, "base": 10}),
        (tune.qlograndint(1, 100, 5), {"sampler": "qlograndint", "lower": 1, "upper": 100, "q": 5, "base": 10}),
        (tune.randn(), {"sampler": "randn", "sd": 1}),
        (tune.qrandn(1, 2, 0.5), {"sampler": "qrandn", "mean": 1, "sd": 2, "q": 0.5}),
        (tune.choice(["a", 1, None]), {"sampler": "choice", "values": ["a", 1, None]}),
    ]
    for domain, expected in cases:
        assert json_format.MessageToDict(domain.to_proto(), preserving_proto_field_name=True) == expected
    assert tune.grid_search([1, 2]) == {"grid_search": [1, 2]}


def test_sample_from_pickles_the_function():
    msg = tune.sample_from(lambda spec: spec.config["a"] * 2).to_proto()
    assert msg.sampler == "sample_from"

    class Spec:
        config = {"a": 3}

    assert cloudpickle.loads(msg.pickled_function)(Spec()) == 6


@pytest.mark.parametrize(
    "make",
    [
        lambda: tune.uniform(2, 1),
        lambda: tune.uniform(1, 1),
        lambda: tune.uniform(0, float("inf")),
        lambda: tune.loguniform(0, 1),
        lambda: tune.quniform(0, 1, 0),
        lambda: tune.qrandint(0, 10, -1),
        lambda: tune.randint(0, 1.5),
        lambda: tune.randint(5, 5),
        lambda: tune.lograndint(0, 10),
        lambda: tune.randn(0, -1),
        lambda: tune.choice([]),
        lambda: tune.choice("abc"),
        lambda: tune.choice([object()]).to_proto(),  # objects travel only where a param_space puts them
        lambda: tune.grid_search([]),
        lambda: tune.sample_from(3),
    ],
)
def test_bad_samplers_are_refused_here(make):
    with pytest.raises(InvalidArgumentError):
        make()


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**31), 2**31), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
samplers = st.one_of(
    st.builds(lambda a, b: tune.uniform(min(a, b), max(a, b) + 1), st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)),
    st.builds(lambda a: tune.randint(a, a + 5), st.integers(-100, 100)),
    st.lists(json_leaf, min_size=1, max_size=3).map(tune.choice),
    st.lists(json_leaf, min_size=1, max_size=3).map(tune.grid_search),
    st.lists(json_leaf, min_size=1, max_size=3).map(lambda v: {"grid_search": v}),
)
nested = st.recursive(
    st.one_of(json_leaf, samplers, st.lists(json_leaf, max_size=3)),
    lambda children: st.dictionaries(st.text(min_size=1, max_size=5), children, max_size=4),
    max_leaves=12,
)


def _sampler_paths(value, path=()):
    if isinstance(value, Domain) or (isinstance(value, dict) and list(value) == ["grid_search"]):
        return {path}
    if isinstance(value, dict):
        return set().union(*(_sampler_paths(v, (*path, k)) for k, v in value.items())) if value else set()
    return set()


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), nested, max_size=4))
def test_any_space_splits_into_json_constants_and_params_that_join_back(space):
    constants, params = split_space(space)
    to_struct(constants, "param_space")  # the constants are JSON
    assert not _sampler_paths(constants)
    assert {path for path, _ in params} == _sampler_paths(space)
    assert join_space(constants, params) == space


# --- ResultGrid ---------------------------------------------------------------------------------------
def _trial(index, state, metrics, config, best=None, history=()):
    trial = tune_pb2.Trial(
        index=index,
        run_id=f"run{index}" if state != common_pb2.PENDING else "",
        state=state,
        config=to_struct(config, "config"),
        last_result=metrics_to_struct(metrics),
        num_reports=len(history),
    )
    if best is not None:
        trial.best_metric = best
    return trial


class FakeRuns:
    """GetRun and WatchRunBatched of finished trial runs."""

    def __init__(self, histories: dict[str, list[dict]], states: dict[str, int]) -> None:
        self.histories, self.states, self.calls = histories, states, []

    def get_run(self, run_id: str) -> coordinator_pb2.Run:
        self.calls.append(("get_run", run_id))
        history = self.histories[run_id]
        run = coordinator_pb2.Run(run_id=run_id, name=run_id, state=self.states[run_id], path=f"file:///s/{run_id}")
        if history:
            run.latest_metrics.CopyFrom(metrics_to_struct(history[-1]))
        if self.states[run_id] == common_pb2.FAILED:
            run.error.CopyFrom(common_pb2.WorkerError(world_rank=0, exc_type="ValueError", message="boom"))
        return run

    def watch_run(self, run_id: str):
        self.calls.append(("watch_run", run_id))
        for i, metrics in enumerate(self.histories[run_id]):
            yield coordinator_pb2.RunEvent(
                event_id=i + 1, metrics=coordinator_pb2.MetricsEvent(metrics=metrics_to_struct(metrics))
            )
        yield coordinator_pb2.RunEvent(event_id=99, state_change=coordinator_pb2.StateChange(state=self.states[run_id]))


@pytest.fixture
def grid():
    histories = {
        "run0": [{"loss": 0.9, "training_iteration": 1}, {"loss": 0.5, "training_iteration": 2}],
        "run1": [{"loss": 0.2, "training_iteration": 1}, {"loss": 0.6, "training_iteration": 2}],
        "run2": [{"loss": 0.7, "training_iteration": 1}],
        "run3": [{"loss": float("nan"), "training_iteration": 1}],
    }
    states = {
        "run0": common_pb2.SUCCEEDED,
        "run1": common_pb2.SUCCEEDED,
        "run2": common_pb2.FAILED,
        "run3": common_pb2.CANCELLED,
    }
    request = tune_pb2.TuneRequest(
        param_space=to_struct({"train_loop_config": {"epochs": 2}}, "p"),
        tune_config=tune_pb2.TuneConfig(metric="loss", mode="min"),
    )
    run = tune_pb2.TuneRun(
        tune_id="t1",
        name="search",
        state=common_pb2.SUCCEEDED,
        request=request,
        best_trial=1,
        num_trials_planned=5,
        trials=[
            _trial(0, common_pb2.SUCCEEDED, histories["run0"][-1], {"train_loop_config": {"lr": 0.1}}, 0.5),
            _trial(1, common_pb2.SUCCEEDED, histories["run1"][-1], {"train_loop_config": {"lr": 0.01}}, 0.2),
            _trial(2, common_pb2.FAILED, histories["run2"][-1], {"train_loop_config": {"lr": 1.0}}, 0.7),
            _trial(3, common_pb2.CANCELLED, histories["run3"][-1], {"train_loop_config": {"lr": 2.0}}),
            _trial(4, common_pb2.PENDING, {}, {"train_loop_config": {"lr": 3.0}}),
        ],
    )
    runs = FakeRuns({**histories}, states)
    return tune.ResultGrid(run, runs), runs


def test_best_result_by_last_and_all(grid):
    results, runs = grid
    best = results.get_best_result()  # TuneConfig's metric and mode, last report
    assert best.run_id == "run0" and best.metrics["loss"] == 0.5
    assert best.config == {"train_loop_config": {"epochs": 2, "lr": 0.1}}
    assert len(best.metrics_dataframe) == 2
    assert results.get_best_result(scope="all").run_id == "run1"  # by Trial.best_metric
    assert {run for _, run in runs.calls} == {"run0", "run1"}  # only the Results returned were read
    assert results.get_best_result(mode="max").run_id == "run2"
    assert results.get_best_result("training_iteration", "max", scope="all").run_id in ("run0", "run1")
    assert results.get_best_result(scope="avg").run_id == "run1"  # (0.2 + 0.6) / 2
    assert results.get_best_result(mode="max", filter_nan_and_inf=False).run_id == "run2"  # NaN never wins
    with pytest.raises(RuntimeError):
        results.get_best_result("accuracy", "max")
    with pytest.raises(InvalidArgumentError):
        results.get_best_result(scope="best")


def test_dataframe_has_a_row_per_trial(grid):
    results, _ = grid
    frame = results.get_dataframe()
    assert len(frame) == 5
    assert {"loss", "training_iteration", "config/train_loop_config/lr", "config/train_loop_config/epochs"} <= set(
        frame.columns
    )
    assert list(frame["trial_id"]) == ["run0", "run1", "run2", "run3", ""]
    assert list(frame["state"]) == ["SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED", "PENDING"]
    best_rows = results.get_dataframe(filter_metric="loss", filter_mode="min")
    assert list(best_rows["loss"])[:3] == [0.5, 0.2, 0.7]


def test_errors_and_counts(grid):
    results, _ = grid
    assert len(results) == 5 and results.num_errors == 1 and results.num_terminated == 3
    (error,) = results.errors
    assert isinstance(error, TrainingFailedError) and "boom" in str(error)
    assert error.result.run_id == "run2" and error.result.state == "FAILED"
    assert [r.state for r in results] == ["SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED", "PENDING"]
    assert results[-1].config["train_loop_config"]["lr"] == 3.0
    assert results.experiment_path == "t1"


# --- the CLI ---------------------------------------------------------------------------------------------
def test_cli_parses_the_tunes_commands():
    parser = cli.build_parser()
    args = parser.parse_args(["tunes", "list", "--page-size", "5"])
    assert (args.fn, args.page_size) == (cli._tunes_list, 5)
    for action in ("show", "watch", "cancel"):
        args = parser.parse_args(["tunes", action, "my-search"])
        assert args.tune == "my-search" and args.fn is getattr(cli, f"_tunes_{action}")
    with pytest.raises(SystemExit):
        parser.parse_args(["tunes", "show"])


class FakeTuner:
    def __init__(self, snapshots: list[tune_pb2.TuneRun]) -> None:
        self.snapshots = snapshots

    def get_tune(self, tune_id: str) -> tune_pb2.TuneRun:
        return self.snapshots[0]

    def watch_tune(self, tune_id: str):
        yield from self.snapshots[1:]

    def list_tunes(self, page_size: int, page_token: str) -> tune_pb2.ListTunesResponse:
        return tune_pb2.ListTunesResponse(tunes=[self.snapshots[-1]])


def _snapshots(final_state):
    config = tune_pb2.TuneConfig(metric="loss", mode="min")
    first = tune_pb2.TuneRun(
        tune_id="t9", name="s", state=common_pb2.RUNNING, best_trial=-1, num_trials_planned=2,
        request=tune_pb2.TuneRequest(tune_config=config),
        trials=[_trial(0, common_pb2.RUNNING, {}, {"lr": 0.1})],
    )  # fmt: skip
    second = tune_pb2.TuneRun()
    second.CopyFrom(first)
    second.trials[0].state = common_pb2.SUCCEEDED
    second.trials[0].last_result.CopyFrom(metrics_to_struct({"loss": 0.25}))
    second.trials[0].best_metric = 0.25
    second.best_trial = 0
    second.trials.append(_trial(1, common_pb2.RUNNING, {}, {"lr": 0.2}))
    third = tune_pb2.TuneRun()
    third.CopyFrom(second)
    third.trials[1].state = common_pb2.FAILED
    third.state = final_state
    return [first, second, third]


@pytest.mark.parametrize(("final", "code"), [(common_pb2.SUCCEEDED, 0), (common_pb2.CANCELLED, 1)])
def test_cli_watch_prints_changes_and_exits_by_the_state(monkeypatch, capsys, final, code):
    monkeypatch.setattr(cli, "_client", lambda args: FakeTuner(_snapshots(final)))
    assert cli.main(["tunes", "watch", "t9"]) == code
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[s] trial 0 RUNNING")
    assert any("trial 0 SUCCEEDED" in line and "loss=0.25" in line for line in out)
    assert "[s] best: trial 0 loss=0.25" in out
    assert any("trial 1 FAILED" in line for line in out)
    assert out[-1] == f"[s] search {common_pb2.RunState.Name(final)}"


def test_cli_list_shows_trials_and_best(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_client", lambda args: FakeTuner(_snapshots(common_pb2.SUCCEEDED)))
    assert cli.main(["tunes", "list"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:4] == ["t9", "s", "SUCCEEDED", "2/2"] and row[-2:] == ["0", "loss=0.25"]
