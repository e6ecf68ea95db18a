"""Property-based: Tune requests never get INTERNAL, and a search never ends on an internal error.

Search algorithms and schedulers are libraries (Optuna, numpy): whatever they raise on a request
is the request's fault (INVALID_ARGUMENT) or the search's (FAILED_PRECONDITION), naming them.
"""

from __future__ import annotations

import os

import grpc
import pytest
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from trainwire import RunConfig, ScalingConfig, tune
from trainwire.tune import TuneConfig, Tuner
from trainwire.tune.search.optuna import OptunaSearch
from trainwire.xgboost import XGBoostTrainer
from trainwire_core.grpc_status import field_of
from trainwire_core.v1 import common_pb2, tune_pb2, tune_pb2_grpc

pytestmark = pytest.mark.timeout(300)

CLIENT_FAULTS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
}
# A resource no cluster has: the first trial's check (the last one of Tune) refuses it, so the
# fuzzer passes through the plan, the searcher's first suggestion and the scheduler without runs.
NEVER = "trainwire_fuzz_never"
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_N = int(os.environ.get("TRAINWIRE_FUZZ_EXAMPLES", "80"))
FUZZ = settings(max_examples=_N, deadline=None, suppress_health_check=list(HealthCheck), phases=_PHASES)
FEW = settings(max_examples=max(_N // 10, 6), deadline=None, suppress_health_check=list(HealthCheck), phases=_PHASES)
PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss"], "tree_method": "hist", "seed": 0}


# --- strategies ---------------------------------------------------------------------------
def mostly(good, bad):
    """``good`` seven times in eight: a request must pass most checks to reach the libraries."""
    return st.integers(0, 7).flatmap(lambda i: bad if i == 7 else good)


weird = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e-300, 1e300, 1.0000001, 2.0**40, 2.0**63]),
)
LOW, HIGH = st.sampled_from([0.001, 0.01, 0.1, 1.0, 2.0]), st.sampled_from([0.5, 1.0, 3.0, 10.0, 100.0])
SAMPLERS = ["grid_search", "choice", "uniform", "quniform", "loguniform", "qloguniform", "randint", "qrandint"]
SAMPLERS += ["lograndint", "qlograndint", "randn", "qrandn"]
json_values = st.one_of(
    st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4), st.booleans()
)
PATHS = [["params", "eta"], ["params", "max_depth"], ["num_boost_round"], ["scaling_config", "num_workers"]]
# (resources_per_worker is not searched here: it would replace the resource no node has.)
BAD_PATHS = [["scaling_config", "placement_strategy"], ["train_loop_config", "lr"], ["datasets"], [], ["params", ""]]


@st.composite
def domains(draw) -> tune_pb2.Domain:
    sampler = draw(mostly(st.sampled_from(SAMPLERS), st.sampled_from(["sample_from", "bayes", ""])))
    # Bounds that suit the sampler, mostly: integer ones for the int samplers, lower < upper.
    low, high = draw(LOW), draw(HIGH)
    if "int" in sampler:
        low, high = float(max(int(low), 1)), float(int(high) + 2)
    d = tune_pb2.Domain(
        sampler=sampler,
        lower=draw(mostly(st.just(min(low, high / 2)), weird)),
        upper=draw(mostly(st.just(high), weird)),
        q=draw(mostly(st.sampled_from([0.0, 0.0, 1.0]), weird)),
        base=draw(mostly(st.sampled_from([0.0, 2.0, 10.0]), weird)),
        mean=draw(mostly(st.sampled_from([0.0, 1.0]), weird)),
        sd=draw(mostly(st.sampled_from([0.0, 1.0]), weird)),
    )
    d.values.extend(draw(st.lists(json_values, min_size=draw(mostly(st.just(1), st.just(0))), max_size=4)))
    if draw(st.integers(0, 7)) == 7:
        d.pickled_function = draw(st.binary(max_size=8))
    return d


@st.composite
def tune_configs(draw) -> tune_pb2.TuneConfig:
    config = tune_pb2.TuneConfig(
        metric=draw(mostly(st.just("valid-logloss"), st.sampled_from(["", "nope"]))),
        mode=draw(mostly(st.sampled_from(["min", "max"]), st.sampled_from(["", "sideways"]))),
        num_samples=draw(mostly(st.integers(0, 4), st.sampled_from([-3, -1, 2**30, 2**31 - 1]))),
        max_concurrent_trials=draw(mostly(st.integers(0, 2), st.just(-1))),
        time_budget_s=draw(mostly(st.sampled_from([0.0, 0.0, 30.0]), weird)),
    )
    alg = config.search_alg
    alg.name = draw(mostly(st.sampled_from(["", "variant_generator", "optuna", "optuna"]), st.just("hyperopt")))
    seed = draw(
        st.one_of(st.none(), st.none(), st.integers(0, 2**32 - 1), st.integers(-(2**63), 2**63 - 1), st.just(2**32))
    )
    if seed is not None:
        alg.seed = seed
    alg.max_concurrent = draw(mostly(st.integers(0, 2), st.just(-1)))
    alg.metric = draw(mostly(st.just(""), st.sampled_from(["valid-logloss", "other"])))
    alg.mode = draw(mostly(st.just(""), st.sampled_from(["min", "x"])))
    if draw(st.integers(0, 5)) == 5:  # multi-objective: metric and mode lists, mostly of one length
        n = draw(st.integers(0, 3))
        alg.metrics.extend(
            draw(st.lists(st.sampled_from(["valid-logloss", "train-logloss", ""]), min_size=n, max_size=n))
        )
        m = draw(mostly(st.just(n), st.integers(0, 3)))
        alg.modes.extend(draw(st.lists(st.sampled_from(["min", "max", "up"]), min_size=m, max_size=m)))
    if draw(st.integers(0, 7)) == 7:  # a define-by-run space that is no pickle
        alg.pickled_space = draw(st.binary(max_size=8))
    for _ in range(draw(mostly(st.just(0), st.integers(1, 2)))):
        point = struct_pb2.Struct()
        point.update({"params": {"eta": draw(json_values)}} if draw(st.booleans()) else {"junk": 1})
        alg.points_to_evaluate.append(point)
    sched = config.scheduler
    sched.name = draw(mostly(st.sampled_from(["", "fifo", "asha", "async_hyperband"]), st.just("pbt")))
    sched.time_attr = draw(mostly(st.sampled_from(["", "training_iteration"]), st.just("nope")))
    sched.max_t = draw(mostly(st.sampled_from([0.0, 4.0, 100.0]), weird))
    sched.grace_period = draw(mostly(st.sampled_from([0.0, 1.0, 2.0]), weird))
    sched.reduction_factor = draw(mostly(st.sampled_from([0.0, 2.0, 3.0]), weird))
    sched.brackets = draw(mostly(st.integers(0, 3), st.integers(-1, 20)))
    sched.metric = draw(mostly(st.just(""), st.just("valid-logloss")))
    sched.mode = draw(mostly(st.just(""), st.sampled_from(["min", "max"])))
    return config


@st.composite
def tune_requests(draw, base: tune_pb2.TuneRequest) -> tune_pb2.TuneRequest:
    request = tune_pb2.TuneRequest()
    request.CopyFrom(base)
    paths = draw(st.permutations(PATHS))[: draw(st.integers(0, 2))]
    if draw(st.integers(0, 7)) == 7:
        paths.append(draw(st.sampled_from(BAD_PATHS + PATHS[:1])))
    for path in paths:
        request.search_space.add(path=path, domain=draw(domains()))
    request.tune_config.CopyFrom(draw(tune_configs()))
    return request


# --- tests --------------------------------------------------------------------------------
def _base(client, cancer_data, resources: dict[str, float]) -> tune_pb2.TuneRequest:
    trainer = XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=2,
        datasets={"train": cancer_data[0], "valid": cancer_data[1]},
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker=resources),
    )
    return tune_pb2.TuneRequest(trainer=trainer.build_request(client))


@pytest.fixture(scope="module")
def never_request(client, cancer_data) -> tune_pb2.TuneRequest:
    return _base(client, cancer_data, {"CPU": 1, NEVER: 1})


@pytest.fixture(scope="module")
def runnable_request(client, cancer_data) -> tune_pb2.TuneRequest:
    return _base(client, cancer_data, {"CPU": 0.25})


def _call(stub: tune_pb2_grpc.TunerStub, request: tune_pb2.TuneRequest) -> tune_pb2.TuneRun | None:
    try:
        started = stub.Tune(request, timeout=60)
        event("accepted")
        return started
    except grpc.RpcError as err:
        event(f"{err.code().name} {field_of(err)}")
        assert err.code() in CLIENT_FAULTS, (err.code(), err.details(), request.tune_config, request.search_space)
        if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
            assert field_of(err), err.details()  # the field to change is named
        return None


def test_tune_requests_never_get_internal(client, never_request):
    stub = tune_pb2_grpc.TunerStub(client.channel)

    @FUZZ
    @given(tune_requests(never_request))
    def check(request):
        started = _call(stub, request)
        if started is not None:
            stub.CancelTune(tune_pb2.GetTuneRequest(tune_id=started.tune_id), timeout=60)
        # The first trial needs a resource no node has: a search is never accepted.
        assert started is None

    check()


def test_accepted_searches_never_end_on_an_internal_error(client, runnable_request):
    stub = tune_pb2_grpc.TunerStub(client.channel)

    @FEW
    @given(tune_requests(runnable_request), st.tuples(st.booleans(), st.booleans(), st.booleans()))
    def check(request, flags):
        started = _call(stub, request)
        if started is None:
            return
        # Cancelled at once: what matters is how the searcher and scheduler took the request.
        stub.CancelTune(tune_pb2.GetTuneRequest(tune_id=started.tune_id), timeout=60)
        ended = stub.GetTune(tune_pb2.GetTuneRequest(tune_id=started.tune_id), timeout=60)
        assert ended.state in (common_pb2.CANCELLED, common_pb2.SUCCEEDED, common_pb2.FAILED)
        assert "internal error" not in ended.state_reason, ended.state_reason
        # Tuner.restore's modes on the ended search: a client's call, never INTERNAL.
        resume = tune_pb2.ResumeTuneRequest(tune_id=started.tune_id, resume_unfinished=flags[0])
        resume.resume_errored, resume.restart_errored = flags[1], flags[2]
        try:
            stub.ResumeTune(resume, timeout=60)
        except grpc.RpcError as err:
            assert err.code() in CLIENT_FAULTS, (err.code(), err.details())
        stub.CancelTune(tune_pb2.GetTuneRequest(tune_id=started.tune_id), timeout=60)

    check()


def test_an_out_of_range_optuna_seed_is_invalid_argument_naming_it(client, never_request):
    request = tune_pb2.TuneRequest()
    request.CopyFrom(never_request)
    request.search_space.add(path=["params", "eta"], domain=tune_pb2.Domain(sampler="uniform", lower=0.1, upper=0.3))
    request.tune_config.metric, request.tune_config.mode = "valid-logloss", "min"
    request.tune_config.search_alg.name = "optuna"
    request.tune_config.search_alg.seed = 2**32
    with pytest.raises(grpc.RpcError) as err:
        tune_pb2_grpc.TunerStub(client.channel).Tune(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_of(err.value) == "tune_config.search_alg.seed"
    assert "OptunaSearch's seed must be between 0 and 2**32 - 1" in err.value.details()


def test_an_unseeded_optuna_search_runs(coordinator, cancer_data):
    """Ray's scripts build ``OptunaSearch()`` with no seed: the coordinator draws one Optuna takes."""
    trainer = XGBoostTrainer(
        params=PARAMS,
        label_column="target",
        num_boost_round=2,
        datasets={"train": cancer_data[0], "valid": cancer_data[1]},
    )
    grid = Tuner(
        trainer,
        param_space={"params": {"eta": tune.uniform(0.1, 0.3)}},
        tune_config=TuneConfig(metric="valid-logloss", mode="min", num_samples=2, search_alg=OptunaSearch()),
        run_config=RunConfig(name="optuna-unseeded", verbose=0),
    ).fit()
    assert len(grid) == 2 and grid.num_errors == 0
    assert 0 <= grid.tune_run.request.tune_config.search_alg.seed < 2**32
