"""Property: a request from a token without submit-code never reaches an import or an unpickle.

The coordinator's checks of a Fit (``RunManager.check_fit``) and the predictor's model loading run
here with the interpreter's audit hook watching ``pickle.find_class`` and fresh imports, and with
``importlib.import_module`` recorded: hypothesis draws requests naming code every way a Fit can
(estimators, entry points, RLlib names, pickled functions, configs, preprocessors and estimators,
runtime environments, resume paths) and checkpoints holding pickles, with payloads that would run
``os.system``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import importlib
import os
import pickle
import sys
import threading
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainwire_core.auth import Caller
from trainwire_core.errors import FailedPreconditionError, TrainwireError
from trainwire_core.frameworks import frameworks
from trainwire_core.structs import to_struct
from trainwire_core.v1 import coordinator_pb2

pytestmark = pytest.mark.timeout(300)

MALLORY = Caller("mallory", frozenset({"submit", "read"}))


class _System:
    """Unpickled, runs a shell command (what an attacker uploads)."""

    def __reduce__(self):  # noqa: ANN204 - pickle's protocol
        return (os.system, ("true",))


PAYLOAD = pickle.dumps(_System())


class _Watch:
    """What the watched thread imports and unpickles while ``recording()`` is on."""

    def __init__(self) -> None:
        self.thread: int | None = None
        self.unpickled: list[tuple[str, str]] = []
        self.imported: list[str] = []

    def hook(self, event: str, args: tuple) -> None:
        if self.thread is None:
            return
        if event == "pickle.find_class" and (self.thread == -1 or threading.get_ident() == self.thread):
            self.unpickled.append((args[0], args[1]))
        elif event == "import" and threading.get_ident() == self.thread:
            self.imported.append(args[0])

    @contextmanager
    def recording(self, every_thread: bool = False):
        self.unpickled.clear()
        self.imported.clear()
        self.thread = -1 if every_thread else threading.get_ident()
        real = importlib.import_module

        def import_module(name, package=None):
            if threading.get_ident() == self.thread:
                self.imported.append(name)
            return real(name, package)

        importlib.import_module = import_module
        try:
            yield self
        finally:
            importlib.import_module = real
            self.thread = None


WATCH = _Watch()
sys.addaudithook(WATCH.hook)  # audit hooks cannot be removed: it records only inside recording()

_identifier = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
_module = st.lists(_identifier, min_size=1, max_size=3).map(".".join)
_code_name = st.one_of(
    st.sampled_from(
        [
            "subprocess:Popen",
            "os:system",
            "builtins:eval",
            "posix:system",
            "pty:spawn",
            "sklearn.utils:_joblib",
            "sklearn.linear_model:LinearRegression",
            "sklearn.ensemble:RandomForestClassifier",
            "sklearn.base:BaseEstimator",
            "sklearn.linear_model._base:os",
        ]
    ),
    st.builds(lambda m, a: f"{m}:{a}", _module, _identifier),
    st.builds(lambda m, a: f"{m}.{a}", _module, _identifier),
)


@st.composite
def fit_requests(draw) -> coordinator_pb2.FitRequest:
    request = coordinator_pb2.FitRequest()
    kind = draw(st.sampled_from(["sklearn", "sklearn-pickled", "entry_point", "pickled_function", "rl"]))
    if kind.startswith("sklearn"):
        request.framework = "sklearn"
        if kind == "sklearn":
            request.sklearn.estimator_class = draw(_code_name)
            params = draw(st.sampled_from([{}, {"args": ["/bin/sh", "-c", "true"]}, {"memory": "/tmp"}]))
            request.sklearn.estimator_params.CopyFrom(to_struct(params, "p"))
        else:
            request.sklearn.pickled_estimator = PAYLOAD
        request.sklearn.label_column = "y"
    elif kind in ("entry_point", "pickled_function"):
        request.framework = "data_parallel"
        if kind == "entry_point":
            request.data_parallel.train_loop.entry_point = draw(_code_name)
            if draw(st.booleans()):
                request.data_parallel.pickled_train_loop_config = PAYLOAD
        else:
            request.data_parallel.train_loop.pickled_function = PAYLOAD
    else:
        request.framework = "rllib"
        request.rl.algorithm = draw(st.sampled_from(["PPO", "os:system"]))
        request.rl.env = draw(st.one_of(st.just("CartPole-v1"), _code_name))
    if draw(st.booleans()):
        request.pickled_preprocessor = PAYLOAD
    if draw(st.booleans()):
        request.run_config.runtime_env.pip.append(draw(st.sampled_from(["requests", "-r /etc/passwd"])))
    if draw(st.booleans()):
        request.resume_from_checkpoint = draw(st.sampled_from(["/etc", "runs/x/checkpoints/c1", "file:///root"]))
    return request


def _named_modules(request: coordinator_pb2.FitRequest) -> set[str]:
    names = {request.sklearn.estimator_class, request.data_parallel.train_loop.entry_point, request.rl.env}
    return {n.replace(":", ".").rpartition(".")[0] for n in names if n} - {""}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=fit_requests())
def test_a_fit_without_submit_code_imports_and_unpickles_nothing_it_names(coordinator, request):
    runs = coordinator.server.runs
    allowed = runs.checks.code_policy.allowed_estimator_classes
    with WATCH.recording() as seen:
        try:
            runs.check_fit(request, MALLORY, check_capacity=False)
            refused = None
        except TrainwireError as exc:
            refused = exc
    assert seen.unpickled == [], f"unpickled {seen.unpickled} for {request}"
    for module in _named_modules(request) & set(seen.imported):
        # The one import a request may cause: the estimator class an operator's allow-list names,
        # to check that it is a scikit-learn estimator.
        dotted = request.sklearn.estimator_class.replace(":", ".")
        assert dotted.startswith(module + ".") and any(fnmatch.fnmatchcase(dotted, p) for p in allowed), (
            f"imported {module!r} for {request}"
        )
    if refused is not None:
        assert refused.field, f"{type(refused).__name__} without a field: {refused.message}"
    else:
        # Accepted: it carries no code and names only allowed classes.
        assert not request.pickled_preprocessor and not request.data_parallel.train_loop.pickled_function
        assert request.framework != "sklearn" or any(
            fnmatch.fnmatchcase(request.sklearn.estimator_class.replace(":", "."), p) for p in allowed
        )


_UNPICKLING = sorted(name for name, fw in frameworks().items() if fw.unpickles and fw.model_file)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(framework=st.sampled_from(_UNPICKLING), wrap=st.sampled_from(["pickle", "torch", "raw"]))
def test_the_predictor_unpickles_no_checkpoint_an_untrusted_caller_wrote(tmp_path_factory, framework, wrap):
    from trainwire.config import CheckpointConfig
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager
    from trainwire_core.storage import Store
    from trainwire_predictor.model_repository import ModelRepository

    store = Store(str(tmp_path_factory.mktemp("store")))
    local = tmp_path_factory.mktemp("ckpt")
    model_file = local / frameworks()[framework].model_file
    model_file.parent.mkdir(parents=True, exist_ok=True)
    if wrap == "torch":
        import torch

        torch.save({"model": _System()}, model_file)
    else:
        model_file.write_bytes(PAYLOAD if wrap == "pickle" else b"\x80\x04" + PAYLOAD[2:])
    # As UploadCheckpoint commits a submit token's upload: its manifest does not vouch for the code.
    manager = CheckpointManager(store, "upload-run", "evil", CheckpointConfig(), framework, code_trusted=False)
    manager.commit("c1", 1, {}, store.upload_dir(str(local), store.checkpoint_dir("upload-run", "c1")))
    with WATCH.recording(every_thread=True) as seen:
        with pytest.raises(FailedPreconditionError) as info:
            asyncio.run(ModelRepository(store).get("evil"))
    assert "'evil'" in info.value.message and info.value.field == "model_name"
    assert [c for c in seen.unpickled if c[1] in ("system", "_System")] == [], seen.unpickled
