"""Admission yields one AdmittedRun: the plan is derived once from the request, and bad input still names its field.

Driven through ``RunManager.fit`` with the cluster view faked and the controller built but not
started: no Ray.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainwire.config import CheckpointConfig, FailureConfig
from trainwire_coordinator.admission import fit_checks
from trainwire_coordinator.admission.datasets import DatasetService
from trainwire_coordinator.backends.base import CoordinatorBackend
from trainwire_coordinator.execution.admitted_run import AdmittedRun
from trainwire_coordinator.execution.controller import RunController
from trainwire_coordinator.execution.datasets import RunDatasets
from trainwire_coordinator.metadata import open_metadata_store
from trainwire_coordinator.run_manager import RunManager
from trainwire_coordinator.tune.trials import trial_needs
from trainwire_core.errors import InvalidArgumentError, ResourceExhaustedError
from trainwire_core.storage import Store
from trainwire_core.v1 import coordinator_pb2


def _request(**scaling: Any) -> coordinator_pb2.FitRequest:
    request = coordinator_pb2.FitRequest(framework="torch")
    request.data_parallel.train_loop.entry_point = "my_project.train:loop"
    for key, value in scaling.items():
        if isinstance(value, dict):
            getattr(request.scaling_config, key).update(value)
        else:
            setattr(request.scaling_config, key, value)
    request.run_config.failure_config.max_failures = 2
    request.run_config.checkpoint_config.num_to_keep = 3
    return request


class Counted:
    """Wraps a function and counts its calls."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def runs(tmp_path, monkeypatch) -> RunManager:
    monkeypatch.setattr(fit_checks, "cluster_view", lambda: ({"CPU": 8.0}, 1))
    store = Store(f"file://{tmp_path}/store")
    manager = RunManager(open_metadata_store(str(tmp_path / "meta.db")), store, DatasetService(store), "127.0.0.1:1")
    manager.launched: list[RunController] = []  # type: ignore[misc]
    # The controller is built as for a real run, but not started.
    monkeypatch.setattr(manager, "_launch", lambda controller, resume=False: manager.launched.append(controller))
    return manager


def test_a_fit_derives_its_placement_plan_once(runs, monkeypatch):
    plans = Counted(fit_checks.placement_plan)
    monkeypatch.setattr(fit_checks, "placement_plan", plans)
    # What the plan is made of: no module may read it from the request again.
    scalings = Counted(CoordinatorBackend.placement_scaling)
    sides = Counted(CoordinatorBackend.side_bundles)
    monkeypatch.setattr(CoordinatorBackend, "placement_scaling", lambda self, r: scalings(self, r))
    monkeypatch.setattr(CoordinatorBackend, "side_bundles", lambda self, r: sides(self, r))

    request = _request(num_workers=3, trainer_resources={"CPU": 1.0})
    run = asyncio.run(runs.fit(request))

    assert (plans.calls, scalings.calls, sides.calls) == (1, 1, 1)
    (controller,) = runs.launched
    admitted = controller.admitted
    assert isinstance(admitted, AdmittedRun)
    assert controller.plan is admitted.plan and controller.backend is admitted.backend
    assert admitted.plan.bundles() == [{"CPU": 2.0}, {"CPU": 1.0}, {"CPU": 1.0}]  # the trainer rides on rank 0
    assert admitted.plan.needs() == {"CPU": 4.0} and admitted.plan.strategy == "PACK"
    assert controller.scaling.max_workers == 3 and not controller.scaling.elastic
    # The parsed configs the run is built from, and the store it writes to.
    assert admitted.failure_config == FailureConfig(max_failures=2)
    assert admitted.checkpoint_config == CheckpointConfig(num_to_keep=3)
    assert controller.policy.config.max_failures == 2
    assert admitted.store is runs.store and run.path == runs.store.uri_of(runs.store.run_dir(run.run_id))
    # The controller and its datasets hold the run's own copy of the request.
    assert admitted.request is controller.run.request
    # Neither datasets nor a preprocessor: nothing to fit or shard, so no RunDatasets is built.
    assert controller.data is None
    with_preprocessor = _request(num_workers=3, trainer_resources={"CPU": 1.0})
    with_preprocessor.pickled_preprocessor = b"not unpickled before the run starts"
    asyncio.run(runs.fit(with_preprocessor))
    data = runs.launched[-1].data
    assert isinstance(data, RunDatasets) and data.request is runs.launched[-1].admitted.request
    # The plan is a copy: nothing done to it reaches the recorded request.
    admitted.plan.scaling.num_workers = 9
    assert controller.run.request.scaling_config.num_workers == 3


def test_a_trial_reads_its_needs_from_the_same_derivation(monkeypatch):
    plans = Counted(fit_checks.placement_plan)
    monkeypatch.setattr(fit_checks, "placement_plan", plans)
    monkeypatch.setattr("trainwire_coordinator.tune.trials.placement_plan", plans)
    assert trial_needs(_request(num_workers=2, resources_per_worker={"CPU": 2.0})) == {"CPU": 4.0}
    assert plans.calls == 1


def _unusable_storage_path(request: coordinator_pb2.FitRequest, runs: RunManager) -> None:
    # Inside the store (the path checks pass) but under a file: the run's store cannot be made.
    runs.store.write_bytes(runs.store.path("blocked"), b"")
    request.run_config.storage_path = runs.store.uri_of(runs.store.path("blocked", "runs"))


@pytest.mark.parametrize(
    ("change", "field", "error"),
    [
        (lambda r, _: setattr(r.scaling_config, "num_workers", 0), "scaling_config.num_workers", InvalidArgumentError),
        (lambda r, _: setattr(r.scaling_config, "min_workers", 5), "scaling_config.min_workers", InvalidArgumentError),
        (
            lambda r, _: setattr(r.run_config.failure_config, "max_failures", -2),
            "run_config.failure_config.max_failures",
            InvalidArgumentError,
        ),
        (lambda r, _: setattr(r.run_config, "storage_path", "/etc"), "run_config.storage_path", InvalidArgumentError),
        (_unusable_storage_path, "run_config.storage_path", InvalidArgumentError),
        (
            lambda r, _: r.scaling_config.resources_per_worker.update({"CPU": 16.0}),
            "scaling_config.num_workers",
            ResourceExhaustedError,
        ),
    ],
)
def test_bad_input_is_refused_naming_its_field_and_records_nothing(runs, change, field, error):
    request = _request(num_workers=2)
    change(request, runs)
    with pytest.raises(error) as refused:
        asyncio.run(runs.fit(request))
    assert refused.value.field == field
    assert runs.launched == [] and runs.metadata.list_runs([], 10, "")[0] == []
