"""Property-based: malformed Coordinator requests never get INTERNAL, never write outside the store."""

from __future__ import annotations

import hashlib
import io
import os
import warnings
import zipfile

import grpc
import pyarrow as pa
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from trainwire.client import table_to_ipc
from trainwire_core.grpc_status import field_of
from trainwire_core.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

pytestmark = pytest.mark.timeout(300)

CLIENT_FAULTS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
}
# A resource no cluster has: a fit keeping it passes every other check, then fails the capacity
# check (the last one), so the fuzzer exercises the whole validation without starting runs.
NEVER = "trainwire_fuzz_never"
# No shrinking: against a live server it can outlast the test's timeout; the failing example is
# printed as drawn. TRAINWIRE_FUZZ_EXAMPLES=1000 fuzzes harder.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
_N = int(os.environ.get("TRAINWIRE_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=_N, deadline=None, suppress_health_check=list(HealthCheck), phases=_PHASES)
FEW = settings(max_examples=max(_N // 8, 5), deadline=None, suppress_health_check=list(HealthCheck), phases=_PHASES)

# --- strategies ---------------------------------------------------------------------------
# Protobuf strings are UTF-8: anything but surrogates may travel.
chars = st.characters(blacklist_categories=("Cs",))
garbage = st.text(chars, max_size=12)
TRAVERSALS = [
    "..",
    "../",
    "../escape",
    "../../../../tmp/trainwire-fuzz-escape",
    "a/../../b",
    "./a",
    "a/./b",
    "a//b",
    "/",
    "/abs",
    "/tmp/trainwire-fuzz-escape",
    ".",
    "",
    "a\x00b",
    "\x00",
    "a\\..\\b",
    "~",
    "~/x",
    "%2e%2e/x",
    "x" * 300,
    "/".join(["d"] * 200),
    "manifest.json",
    "checkpoints.json",
    "\n",
    "é/ü",
]
nasty = st.one_of(st.sampled_from(TRAVERSALS), garbage, st.text(chars, min_size=1000, max_size=5000))
absurd_ints32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, -1, 1, 2**31 - 1, -(2**31)]))
absurd_ints64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**63 - 1, -(2**63)]))
absurd_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e308, -0.0, 5e-324]),
)
sha_like = st.one_of(
    st.text("0123456789abcdef", min_size=64, max_size=64),
    st.text("0123456789ABCDEF", min_size=64, max_size=64),
    st.sampled_from(["", "0" * 63, "0" * 65, "../" + "0" * 61, "g" * 64]),
    garbage,
)


def uris(store_uri: str):
    """URIs and paths that look like the store's, or nothing at all."""
    return st.one_of(
        nasty,
        st.builds(lambda p: f"{store_uri}/{p}", nasty),
        st.builds(lambda p: f"{store_uri}/runs/{p}", nasty),
        st.builds(lambda p: f"file://{p}", nasty),
        st.builds(lambda p: f"datasets/{p}", st.one_of(nasty, sha_like)),
        st.sampled_from(
            [
                "file://",
                "file:///",
                "file:///etc/passwd",
                "file:///proc/self/environ",
                "://",
                "s3://",
                "hdfs://nohost:1/x",
                "gs://",
                "mock://x",
                "file:///dev/zero",
                "file://localhost/etc",
                f"{store_uri}/../escape",
                f"{store_uri}/runs/../../escape",
                f"{store_uri}/runs/%2e%2e/x",
                f"{store_uri}/runs/x?y=1",
            ]
        ),
    )


json_scalars = st.one_of(st.none(), st.booleans(), absurd_floats, garbage)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(garbage, inner, max_size=3)),
    max_leaves=6,
)


def struct_of(draw) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    for key, value in draw(st.dictionaries(garbage, json_values, max_size=3)).items():
        try:
            s.update({key: value})
        except (ValueError, TypeError):
            pass
    return s


def _valid_fit(kind: str, dataset_uri: str) -> coordinator_pb2.FitRequest:
    """A fit that passes every check but the capacity one (the NEVER resource)."""
    request = coordinator_pb2.FitRequest()
    if kind in ("xgboost", "lightgbm"):
        request.framework = kind
        request.gbdt.label_column = "y"
        request.gbdt.num_boost_round = 1
    elif kind == "sklearn":
        request.framework = "sklearn"
        request.sklearn.estimator_class = "sklearn.linear_model:LinearRegression"
        request.sklearn.label_column = "y"
    else:
        request.framework = "torch"
        request.data_parallel.train_loop.entry_point = "os:getcwd"
    request.datasets["train"].uri = dataset_uri
    request.scaling_config.num_workers = 1
    request.scaling_config.resources_per_worker["CPU"] = 1
    request.scaling_config.resources_per_worker[NEVER] = 1
    return request


def _mutators(dataset_uri: str, store_uri: str) -> dict:
    """Ways to break one part of a fit; each takes (draw, request)."""

    def framework(draw, r):
        r.framework = draw(st.one_of(st.sampled_from(["", "caffe", "XGBOOST", "../xgboost", "xgboost\x00"]), nasty))

    def trainer(draw, r):
        which = draw(st.sampled_from(["gbdt", "sklearn", "data_parallel", "rl", "none"]))
        if which == "none":
            r.ClearField(r.WhichOneof("trainer") or "gbdt")
        else:
            getattr(r, which).SetInParent()

    def label(draw, r):
        spec = r.sklearn if r.WhichOneof("trainer") == "sklearn" else r.gbdt
        spec.label_column = draw(nasty)

    def gbdt(draw, r):
        r.gbdt.num_boost_round = draw(absurd_ints32)
        r.gbdt.params.CopyFrom(struct_of(draw))
        r.gbdt.dmatrix_params.CopyFrom(struct_of(draw))

    def sklearn(draw, r):
        if draw(st.booleans()):
            r.sklearn.estimator_class = draw(nasty)
        else:
            r.sklearn.pickled_estimator = draw(st.binary(max_size=32))
        r.sklearn.cv = draw(absurd_ints32)
        r.sklearn.parallelize_cv = draw(absurd_ints32)
        r.sklearn.scoring.extend(draw(st.lists(nasty, max_size=2)))
        r.sklearn.estimator_params.CopyFrom(struct_of(draw))

    def data_parallel(draw, r):
        loop = r.data_parallel.train_loop
        if draw(st.booleans()):
            loop.entry_point = draw(nasty)
        else:
            loop.pickled_function = draw(st.binary(max_size=32))
        r.data_parallel.train_loop_config.CopyFrom(struct_of(draw))
        r.data_parallel.backend_config.CopyFrom(struct_of(draw))
        r.data_parallel.pickled_train_loop_config = draw(st.binary(max_size=32))

    def rl(draw, r):
        r.framework = "rllib"
        r.ClearField("datasets")
        r.rl.algorithm = draw(st.one_of(st.just("PPO"), nasty))
        r.rl.env = draw(st.one_of(st.just("CartPole-v1"), nasty))
        r.rl.num_iterations = draw(st.one_of(st.just(1), absurd_ints32))
        r.rl.config.CopyFrom(struct_of(draw))

    def scaling(draw, r):
        sc = r.scaling_config
        sc.num_workers = draw(st.one_of(st.just(1), absurd_ints32))
        sc.use_gpu = draw(st.booleans())
        sc.placement_strategy = draw(st.one_of(st.sampled_from(["", "PACK", "SPREAD", "STRICT_SPREAD"]), nasty))

    def resources(draw, r):
        keys = st.one_of(st.sampled_from(["CPU", "GPU", "memory", ""]), nasty)
        target = draw(st.sampled_from(["resources_per_worker", "trainer_resources"]))
        for key, value in draw(st.dictionaries(keys, absurd_floats, min_size=1, max_size=3)).items():
            if key != NEVER:
                getattr(r.scaling_config, target)[key] = value

    def name(draw, r):
        r.run_config.name = draw(nasty)

    def storage_path(draw, r):
        r.run_config.storage_path = draw(uris(store_uri))

    def run_config(draw, r):
        rc = r.run_config
        for key, value in draw(st.dictionaries(nasty, absurd_floats, max_size=2)).items():
            rc.stop[key] = value
        rc.failure_config.max_failures = draw(absurd_ints32)
        rc.failure_config.fail_fast = draw(st.booleans())
        sync = rc.sync_config
        sync.sync_period_s = draw(absurd_floats)
        sync.sync_timeout_s = draw(absurd_floats)

    def checkpoint_config(draw, r):
        ckpt = r.run_config.checkpoint_config
        if draw(st.booleans()):
            ckpt.num_to_keep = draw(absurd_ints32)
        ckpt.checkpoint_score_attribute = draw(nasty)
        ckpt.checkpoint_score_order = draw(st.one_of(st.sampled_from(["", "max", "min"]), nasty))
        ckpt.checkpoint_frequency = draw(absurd_ints32)
        if draw(st.booleans()):
            ckpt.checkpoint_at_end = draw(st.booleans())

    def datasets(draw, r):
        for key in draw(st.lists(st.one_of(st.sampled_from(["train", "valid"]), nasty), min_size=1, max_size=3)):
            ref = r.datasets[key]
            ref.uri = draw(st.one_of(st.just(dataset_uri), uris(store_uri)))
            ref.format = draw(st.one_of(st.sampled_from(["", "parquet", "csv"]), nasty))

    def resume(draw, r):
        r.resume_from_checkpoint = draw(uris(store_uri))

    def preprocessor(draw, r):
        if draw(st.booleans()):
            r.pickled_preprocessor = draw(st.binary(max_size=32))
        r.preprocessor.name = draw(st.one_of(st.sampled_from(["StandardScaler", "Chain", "Concatenator"]), nasty))
        r.preprocessor.params.CopyFrom(struct_of(draw))
        for _ in range(draw(st.integers(0, 2))):
            r.preprocessor.steps.add(name=draw(nasty)).params.CopyFrom(struct_of(draw))

    def extras(draw, r):
        r.idempotency_key = draw(nasty)
        r.metadata.CopyFrom(struct_of(draw))

    def runtime_env(draw, r):
        env = r.run_config.runtime_env
        env.SetInParent()
        if draw(st.booleans()):
            env.working_dir = draw(st.one_of(sha_like, nasty))
        env.py_modules.extend(draw(st.lists(st.one_of(sha_like, nasty), max_size=2)))
        pip_lines = st.one_of(nasty, st.sampled_from(["-r /etc/passwd", "-e .", "--index-url http://x", "numpy"]))
        env.pip.extend(draw(st.lists(pip_lines, max_size=3)))
        for key, value in draw(st.dictionaries(st.one_of(nasty, st.just("RAY_ADDRESS")), nasty, max_size=3)).items():
            env.env_vars[key] = value

    return {
        f.__name__: f
        for f in (
            framework,
            trainer,
            label,
            gbdt,
            sklearn,
            data_parallel,
            rl,
            scaling,
            resources,
            name,
            storage_path,
            run_config,
            checkpoint_config,
            datasets,
            resume,
            preprocessor,
            extras,
            runtime_env,
        )
    }


@st.composite
def fit_requests(draw, dataset_uri: str, store_uri: str) -> coordinator_pb2.FitRequest:
    """A valid fit (guarded by NEVER) with zero to three parts broken."""
    request = _valid_fit(draw(st.sampled_from(["xgboost", "lightgbm", "sklearn", "torch"])), dataset_uri)
    mutators = _mutators(dataset_uri, store_uri)
    for name in draw(st.lists(st.sampled_from(sorted(mutators)), max_size=3)):
        mutators[name](draw, request)
    return request


# --- fixtures and checks ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def channel(coordinator_address):
    ch = grpc.insecure_channel(coordinator_address, options=[("grpc.max_send_message_length", 64 << 20)])
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(channel, nothing_escapes_the_store):
    return coordinator_pb2_grpc.CoordinatorStub(channel)


@pytest.fixture(scope="module")
def dataset(client):
    return client.upload_table(pa.table({"x": [1.0, 2.0, 3.0, 4.0], "y": [0.0, 1.0, 0.0, 1.0]}))


@pytest.fixture(scope="module")
def known_run(stub):
    """A SUCCEEDED run with one committed checkpoint (uploaded; no cluster time)."""
    data = b"fuzz-model"
    header = coordinator_pb2.UploadCheckpointHeader(run_name="fuzz-known")
    header.files.add(path="model.bin", size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    info = stub.UploadCheckpoint(
        iter(
            [
                coordinator_pb2.UploadCheckpointRequest(header=header),
                coordinator_pb2.UploadCheckpointRequest(chunk=coordinator_pb2.FileChunk(path="model.bin", data=data)),
            ]
        )
    )
    run = stub.GetRun(coordinator_pb2.GetRunRequest(run_id="fuzz-known"))
    return run, info


def _tree(root: str) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


@pytest.fixture(scope="module")
def nothing_escapes_the_store(store, channel, tmp_path_factory):
    """After all the fuzzing: nothing new beside the store, the store keeps its layout, the server serves."""
    home = os.path.dirname(store.root)
    before = set(os.listdir(home))
    cwd_before = set(os.listdir(os.getcwd()))
    escape = "/tmp/trainwire-fuzz-escape"
    assert not os.path.exists(escape)
    yield
    assert set(os.listdir(home)) - before <= {n for n in os.listdir(home) if n.startswith("state.db")}
    assert set(os.listdir(os.getcwd())) == cwd_before
    assert not os.path.exists(escape)
    assert set(os.listdir(store.root)) <= {"runs", "names", "datasets", "packages"}
    for path in _tree(store.path("datasets")):
        parts = path.split(os.sep)
        assert len(parts[0]) == 64 and (len(parts) == 1 or parts[1] in ("data.parquet", "meta.json")), path
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service="trainwire.v1.Coordinator"), timeout=10)
    assert status.status == health_pb2.HealthCheckResponse.SERVING


def check_error(err: grpc.RpcError) -> None:
    assert err.code() in CLIENT_FAULTS, (err.code(), err.details())
    assert err.details()
    if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
        assert field_of(err), ("no field named", err.details())


def call(fn, request, timeout: float = 30):
    """The reply (a list for server streams), or None after a checked client-fault error."""
    try:
        reply = fn(request, timeout=timeout)
        if hasattr(reply, "__iter__") and not hasattr(reply, "ListFields"):
            reply = list(reply)
        event("ok")
        return reply
    except grpc.RpcError as err:
        event(f"{err.code().name} {field_of(err)}")
        check_error(err)
        return None


def still_serving(stub, known_run) -> None:
    run, _ = known_run
    assert stub.GetRun(coordinator_pb2.GetRunRequest(run_id=run.run_id), timeout=10).run_id == run.run_id


# --- Fit ----------------------------------------------------------------------------------------------
@FUZZ
@given(data=st.data())
def test_fit_validation_never_gets_internal(stub, store, dataset, known_run, data):
    request = data.draw(fit_requests(dataset.ref.uri, store.uri))
    run = call(stub.Fit, request)
    if run is not None:  # the guard resource was dropped; never let it take the cluster
        stub.CancelRun(coordinator_pb2.CancelRunRequest(run_id=run.run_id), timeout=30)
        pytest.fail(f"a fit with the {NEVER} resource was accepted: {run.run_id}")
    still_serving(stub, known_run)


@FEW
@given(
    name=st.one_of(nasty, st.just("")),
    # Absolute paths are a run's own store (allowed); relative ones would land beside the coordinator.
    storage_path=st.one_of(st.just(""), st.sampled_from([p for p in TRAVERSALS if not p.startswith("/")])),
    key=nasty,
)
def test_fits_that_pass_validation_are_cancelled_at_once(stub, store, dataset, known_run, name, storage_path, key):
    """Names, storage paths and idempotency keys past the capacity check; the run is cancelled at once."""
    request = coordinator_pb2.FitRequest(
        framework="xgboost", gbdt=coordinator_pb2.GBDTSpec(label_column="y", num_boost_round=1)
    )
    request.scaling_config.num_workers = 1
    # More CPU than is free lets the run wait in PENDING rather than take the cluster.
    request.scaling_config.resources_per_worker["CPU"] = 4
    request.datasets["train"].CopyFrom(dataset.ref)
    request.run_config.name = name
    request.run_config.storage_path = storage_path
    request.idempotency_key = key
    run = call(stub.Fit, request)
    if run is not None:
        cancelled = stub.CancelRun(coordinator_pb2.CancelRunRequest(run_id=run.run_id), timeout=60)
        assert cancelled.state in (common_pb2.CANCELLED, common_pb2.SUCCEEDED, common_pb2.FAILED)
        if not storage_path:
            assert run.path == store.uri_of(store.run_dir(run.run_id))
    still_serving(stub, known_run)


# --- runs by id ------------------------------------------------------------------------------------
run_refs = st.one_of(nasty, st.text(chars, min_size=1, max_size=40))


@FUZZ
@given(run_id=run_refs, after=absurd_ints64)
def test_get_cancel_watch_with_garbage_ids(stub, known_run, run_id, after):
    call(stub.GetRun, coordinator_pb2.GetRunRequest(run_id=run_id))
    call(stub.CancelRun, coordinator_pb2.CancelRunRequest(run_id=run_id))
    for watch in (stub.WatchRun, stub.WatchRunBatched):
        call(watch, coordinator_pb2.WatchRunRequest(run_id=run_id, after_event_id=after), timeout=10)
        # The known (ended) run's stream ends whatever after_event_id is.
        run, _ = known_run
        call(watch, coordinator_pb2.WatchRunRequest(run_id=run.run_id, after_event_id=after), timeout=10)
    still_serving(stub, known_run)


@FUZZ
@given(
    states=st.lists(st.one_of(st.integers(0, 7), absurd_ints32), max_size=4),
    page_size=absurd_ints32,
    token=st.one_of(nasty, st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=", max_size=40)),
)
def test_list_runs_with_garbage_pages(stub, known_run, states, page_size, token):
    request = coordinator_pb2.ListRunsRequest(page_size=page_size, page_token=token)
    request.states.extend(states)
    call(stub.ListRuns, request)
    still_serving(stub, known_run)


# --- dataset uploads ---------------------------------------------------------------------------------
@st.composite
def dataset_uploads(draw):
    data = table_to_ipc(pa.table({"v": draw(st.lists(st.integers(-5, 5), min_size=1, max_size=4))}))
    if draw(st.booleans()):
        data = draw(st.binary(max_size=64))
    sha = hashlib.sha256(data).hexdigest() if draw(st.booleans()) else draw(sha_like)
    size = len(data) if draw(st.booleans()) else draw(absurd_ints64)
    cut = draw(st.integers(0, len(data)))
    chunks = [data[:cut], data[cut:]]
    parts = [
        coordinator_pb2.UploadDatasetRequest(header=coordinator_pb2.UploadDatasetHeader(sha256=sha, size_bytes=size))
    ]
    parts += [coordinator_pb2.UploadDatasetRequest(chunk=c) for c in chunks]
    mutation = draw(
        st.sampled_from(["none", "no_header", "two_headers", "dup", "drop", "swap", "empty", "header_last"])
    )
    if mutation == "no_header":
        parts = parts[1:]
    elif mutation == "two_headers":
        parts.insert(draw(st.integers(1, len(parts))), parts[0])
    elif mutation == "dup":
        parts.append(parts[-1])
    elif mutation == "drop":
        del parts[draw(st.integers(1, len(parts) - 1))]
    elif mutation == "swap":
        parts[1], parts[2] = parts[2], parts[1]
    elif mutation == "empty":
        parts = []
    elif mutation == "header_last":
        parts = parts[1:] + parts[:1]
    if draw(st.booleans()):
        parts.append(coordinator_pb2.UploadDatasetRequest())  # no part set
    return parts


@FUZZ
@given(parts=dataset_uploads(), sha=sha_like)
def test_dataset_uploads_and_lookups(stub, known_run, parts, sha):
    info = call(stub.UploadDataset, iter(parts))
    if info is not None:
        assert stub.GetDataset(coordinator_pb2.GetDatasetRequest(sha256=info.sha256)).sha256 == info.sha256
    call(stub.GetDataset, coordinator_pb2.GetDatasetRequest(sha256=sha))
    still_serving(stub, known_run)


# --- runtime-environment packages and worker logs -----------------------------------------------------
@st.composite
def package_uploads(draw):
    """Zip archives with hostile entries (traversals, links, bombs) or no zip at all, in header-first parts."""
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        warnings.simplefilter("ignore")  # duplicate names are part of the test
        for name in draw(st.lists(st.one_of(nasty, st.sampled_from(["ok.py", "pkg/__init__.py"])), max_size=3)):
            info = zipfile.ZipInfo(name or "x")
            info.external_attr = draw(st.sampled_from([0, 0o100644, 0o120777, 0o040755, 0o020644])) << 16
            size = draw(st.sampled_from([0, 10, 3 << 20]))
            try:
                archive.writestr(info, b"\0" * size, compress_type=zipfile.ZIP_DEFLATED)
            except (ValueError, UnicodeEncodeError):
                pass
    data = buf.getvalue() if draw(st.booleans()) else draw(st.binary(max_size=64))
    sha = hashlib.sha256(data).hexdigest() if draw(st.booleans()) else draw(sha_like)
    size = len(data) if draw(st.booleans()) else draw(absurd_ints64)
    parts = [
        coordinator_pb2.UploadPackageRequest(header=coordinator_pb2.UploadPackageHeader(sha256=sha, size_bytes=size))
    ]
    parts.append(coordinator_pb2.UploadPackageRequest(chunk=data))
    if draw(st.booleans()):
        parts = parts[::-1]
    return parts


@FUZZ
@given(parts=package_uploads(), sha=sha_like)
def test_package_uploads_never_get_internal_nor_escape(stub, known_run, parts, sha):
    info = call(stub.UploadPackage, iter(parts))
    if info is not None:
        assert stub.GetPackage(coordinator_pb2.GetPackageRequest(sha256=info.sha256)).sha256 == info.sha256
    call(stub.GetPackage, coordinator_pb2.GetPackageRequest(sha256=sha))
    still_serving(stub, known_run)


@FUZZ
@given(run_id=run_refs, ranks=st.lists(absurd_ints32, max_size=3), after=st.one_of(nasty, st.just("0.0:1.2")))
def test_watch_logs_with_garbage(stub, known_run, run_id, ranks, after):
    call(stub.WatchLogs, coordinator_pb2.WatchLogsRequest(run_id=run_id, ranks=ranks, after=after), timeout=10)
    run, _ = known_run
    request = coordinator_pb2.WatchLogsRequest(run_id=run.run_id, ranks=ranks, after=after, follow=True)
    call(stub.WatchLogs, request, timeout=30)  # the run has ended: the stream ends too
    still_serving(stub, known_run)


# --- checkpoint uploads and downloads ---------------------------------------------------------------
file_paths = st.one_of(st.sampled_from(["model.bin", "sub/config.json", "empty"]), nasty)


@st.composite
def checkpoint_uploads(draw):
    files = {}
    for path in draw(st.lists(file_paths, min_size=0, max_size=3)):
        files[path] = draw(st.binary(max_size=48))
    header = coordinator_pb2.UploadCheckpointHeader(run_name=draw(st.one_of(st.just("fuzz-upload"), nasty)))
    header.metrics.CopyFrom(struct_of(draw))
    for path, data in files.items():
        sha = hashlib.sha256(data).hexdigest() if draw(st.booleans()) else draw(sha_like)
        size = len(data) if draw(st.booleans()) else draw(absurd_ints64)
        header.files.add(path=path, size_bytes=size, sha256=sha)
    if draw(st.booleans()) and header.files:
        header.files.append(header.files[0])  # listed twice
    parts = [coordinator_pb2.UploadCheckpointRequest(header=header)]
    for path, data in files.items():
        cut = draw(st.integers(0, len(data)))
        for offset, piece in ((0, data[:cut]), (cut, data[cut:])):
            parts.append(
                coordinator_pb2.UploadCheckpointRequest(
                    chunk=coordinator_pb2.FileChunk(path=path, offset=offset, data=piece)
                )
            )
    mutation = draw(
        st.sampled_from(
            ["none", "none", "no_header", "two_headers", "dup", "drop", "reorder", "offset", "path", "huge"]
        )
    )
    if mutation == "no_header":
        parts = parts[1:]
    elif mutation == "two_headers":
        parts.insert(draw(st.integers(1, len(parts))), parts[0])
    elif mutation == "dup" and len(parts) > 1:
        parts.insert(draw(st.integers(1, len(parts))), parts[draw(st.integers(1, len(parts) - 1))])
    elif mutation == "drop" and len(parts) > 1:
        del parts[draw(st.integers(1, len(parts) - 1))]
    elif mutation == "reorder" and len(parts) > 2:
        parts[1:] = draw(st.permutations(parts[1:]))
    elif mutation == "offset" and len(parts) > 1:
        parts[draw(st.integers(1, len(parts) - 1))].chunk.offset = draw(absurd_ints64)
    elif mutation == "path" and len(parts) > 1:
        parts[draw(st.integers(1, len(parts) - 1))].chunk.path = draw(file_paths)
    elif mutation == "huge" and len(parts) > 1:
        parts[1].chunk.data = b"\x00" * (5 << 20)
    return parts


@FUZZ
@given(parts=checkpoint_uploads())
def test_checkpoint_uploads_never_get_internal_nor_escape(stub, store, known_run, parts):
    runs_before = set(store.list_dir(store.path("runs")))
    info = call(stub.UploadCheckpoint, iter(parts))
    runs_after = set(store.list_dir(store.path("runs")))
    if info is None:
        assert runs_after == runs_before, "a refused upload left files behind"
    else:
        (new,) = runs_after - runs_before
        header = parts[0].header
        root = store.checkpoint_dir(new, info.checkpoint_id)
        stored = {p for p in _tree(root) if os.path.isfile(os.path.join(root, p))}
        assert stored == {f.path for f in header.files} | {"manifest.json"}
        back = call(stub.DownloadCheckpoint, coordinator_pb2.DownloadCheckpointRequest(checkpoint=info.uri))
        assert back is not None and {c.path for c in back} == stored
    still_serving(stub, known_run)


@FUZZ
@given(data=st.data())
def test_download_with_garbage_names_and_uris(stub, store, known_run, data):
    run, info = known_run
    ref = data.draw(
        st.one_of(
            uris(store.uri),
            st.builds(lambda c: f"{run.run_id}/{c}", nasty),
            st.builds(lambda c: f"fuzz-known/{c}", nasty),
            st.builds(lambda c: f"{info.uri}/{c}", nasty),
            st.builds(lambda r: f"{r}/{info.checkpoint_id}", run_refs),
        )
    )
    chunks = call(stub.DownloadCheckpoint, coordinator_pb2.DownloadCheckpointRequest(checkpoint=ref))
    if chunks is not None:
        for chunk in chunks:
            assert chunk.path and not chunk.path.startswith("/") and ".." not in chunk.path.split("/")
    still_serving(stub, known_run)


# --- Store.download_dir and the paths a filesystem lists ----------------------------------------------
class _KeysWithoutSlash:
    """A local filesystem that lists paths as object stores do: without the leading "/"."""

    def __init__(self, extra: list[str] = ()) -> None:
        import pyarrow.fs as pafs

        self.fs = pafs.LocalFileSystem()
        self.extra = list(extra)

    def get_file_info(self, what):
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(what)
        if not isinstance(what, pafs.FileSelector):
            return infos
        listed = [pafs.FileInfo(i.path.lstrip("/"), type=i.type, size=i.size) for i in infos]
        return listed + [pafs.FileInfo(p, type=pafs.FileType.File, size=1) for p in self.extra]

    def open_input_stream(self, path):
        return self.fs.open_input_stream("/" + path.lstrip("/"))


def test_download_dir_keeps_files_inside_the_target(tmp_path, monkeypatch):
    from trainwire_core.errors import DataLossError
    from trainwire_core.storage import Store

    src = tmp_path / "store" / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "model.bin").write_bytes(b"m")
    (src / "sub" / "config.json").write_bytes(b"{}")
    # Relative to another directory, a path without its leading "/" climbs out of the target.
    monkeypatch.chdir(tmp_path / "store")
    store = Store.for_filesystem(_KeysWithoutSlash(), str(tmp_path / "store"))
    out = tmp_path / "out"
    store.download_dir(str(src), out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "model.bin",
        "sub/config.json",
    ]
    assert (out / "model.bin").read_bytes() == b"m"
    assert store.walk_files(str(src)) == [("model.bin", 1), ("sub/config.json", 2)]
    before = sorted(p for p in tmp_path.rglob("*"))

    for bad in [f"{str(src).lstrip('/')}/../escape", f"{str(src).lstrip('/')}/a//b", "elsewhere/file", "/etc/passwd"]:
        store = Store.for_filesystem(_KeysWithoutSlash([bad]), str(tmp_path / "store"))
        with pytest.raises(DataLossError, match="not a plain relative path"):
            store.download_dir(str(src), tmp_path / "out2")
        with pytest.raises(DataLossError):
            store.walk_files(str(src))
    assert sorted(p for p in tmp_path.rglob("*") if "out2" not in p.parts) == before
    assert not any((tmp_path / "out2").rglob("*"))
