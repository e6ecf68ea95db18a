"""The checks a Fit passes before it is recorded: scopes for the code it carries, paths, settings, capacity.

``RunManager`` holds one ``FitChecks``; a search checks its first trial with the same one. The
checks are blocking (they read the store and ask Ray), so callers run them off the event loop.
What they decide comes back as one ``AdmittedRun``: the parsed configs, the resolved datasets,
the run's store and its placement plan (``placement_plan``, the one place a plan is derived
from a request), which the controller takes as it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow.fs as pafs
import ray

from trainwire.checkpoint import Checkpoint
from trainwire.config import CheckpointConfig, RunConfig, ScalingConfig, check_structs
from trainwire_coordinator.admission.code_policy import CodePolicy
from trainwire_coordinator.admission.datasets import DatasetService
from trainwire_coordinator.admission.runtime_envs import PackageService, check_runtime_env
from trainwire_coordinator.backends import CoordinatorBackend, get_backend
from trainwire_coordinator.execution.admitted_run import AdmittedRun
from trainwire_coordinator.execution.placement import PlacementPlan, bundles_for
from trainwire_coordinator.execution.preprocessors import build_preprocessor
from trainwire_core.auth import ANYONE, SUBMIT_CODE, Caller, current_caller
from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError, ResourceExhaustedError
from trainwire_core.storage import Store
from trainwire_core.v1 import common_pb2, coordinator_pb2

logger = logging.getLogger(__name__)


def carried_code(request: coordinator_pb2.FitRequest) -> bool:
    """Whether a Fit carries code to run on the cluster (pickled functions, estimators or preprocessors)."""
    return bool(
        (
            request.WhichOneof("trainer") == "data_parallel"
            and (
                request.data_parallel.train_loop.WhichOneof("source") == "pickled_function"
                or request.data_parallel.pickled_train_loop_config
            )
        )
        or (
            request.WhichOneof("trainer") == "sklearn"
            and request.sklearn.WhichOneof("estimator") == "pickled_estimator"
        )
        or request.pickled_preprocessor
        or request.run_config.HasField("runtime_env")
    )


def placement_plan(backend: CoordinatorBackend, request: coordinator_pb2.FitRequest) -> PlacementPlan:
    """Where ``request``'s groups are placed, as its framework's backend says; the one derivation of a plan."""
    placed = common_pb2.ScalingConfig()
    placed.CopyFrom(backend.placement_scaling(request))  # some backends hand back the request's own
    return PlacementPlan(placed, tuple(dict(b) for b in backend.side_bundles(request)))


def run_store(default: Store, storage_path: str | None) -> Store:
    """The run's own store (``RunConfig.storage_path``), else ``default`` (the coordinator's)."""
    if not storage_path:
        return default
    try:
        return Store(storage_path)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(exc.message, field="run_config.storage_path") from exc
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot use storage_path {storage_path!r}: {exc}", field="run_config.storage_path"
        ) from exc


def check_feasible(
    scaling: common_pb2.ScalingConfig,
    total: dict[str, float],
    num_nodes: int,
    side: Sequence[dict[str, float]] = (),
) -> None:
    """Raises ResourceExhaustedError when the cluster as it is cannot hold the run (``side``: its side bundles)."""
    bundles = bundles_for(scaling) + list(side)  # an elastic run needs room for its smallest group only
    if scaling.placement_strategy == "STRICT_SPREAD" and len(bundles) > num_nodes:
        raise ResourceExhaustedError(
            f"the run can never be placed: STRICT_SPREAD puts each of {len(bundles)} workers on its own "
            f"node but the cluster has {num_nodes}; use SPREAD or PACK, or fewer workers",
            field="scaling_config.placement_strategy",
        )
    need: dict[str, float] = {}
    for bundle in bundles:
        for key, value in bundle.items():
            need[key] = need.get(key, 0) + value
    short = {k: (v, total.get(k, 0)) for k, v in need.items() if v > total.get(k, 0)}
    if short:
        detail = ", ".join(f"{v:g} {k} (cluster has {have:g})" for k, (v, have) in short.items())
        what = f"{len(bundles) - len(side)} workers x {bundles[0]}" + (f" and {len(side)} side bundles" if side else "")
        raise ResourceExhaustedError(
            f"the run can never be placed: {what} need {detail}; "
            "lower scaling_config.num_workers or resources_per_worker",
            field="scaling_config.num_workers",
        )


def wait_until_feasible(
    scaling: common_pb2.ScalingConfig,
    cluster: Callable[[], tuple[dict[str, float], int]],
    wait_s: float,
    *,
    poll_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    side: Sequence[dict[str, float]] = (),
) -> None:
    """Waits up to ``wait_s`` for a cluster too small for the run to grow, then refuses it.

    A node that is still starting (``docker compose up`` returns once the head is healthy) or
    restarting has not yet added its CPUs: refusing at once would call a run that fits in a
    few seconds impossible.

    Args:
        scaling: The run's scaling config.
        cluster: Returns the cluster's total resources and its number of live nodes.
        wait_s: How long to wait; 0 refuses at once.
        poll_s: How often to look again.
        sleep: Waits between looks (tests pass a fake clock's).
        clock: Seconds, for the deadline (asking Ray takes time too).
        side: The run's side bundles (``CoordinatorBackend.side_bundles``).
    """
    started, logged = clock(), False
    while True:
        try:
            check_feasible(scaling, *cluster(), side)
            return
        except ResourceExhaustedError as exc:
            waited = clock() - started
            if waited >= wait_s:
                if not wait_s:
                    raise
                raise ResourceExhaustedError(
                    f"{exc.message} (after waiting {waited:.0f} s for nodes to join)", field=exc.field
                ) from None
            if not logged:
                logger.info("a fit waits up to %g s for nodes to join: %s", wait_s, exc.message)
                logged = True
        sleep(poll_s)


def cluster_view() -> tuple[dict[str, float], int]:
    """The Ray cluster's total resources and its number of live nodes."""
    return ray.cluster_resources(), sum(1 for n in ray.nodes() if n["Alive"])


@dataclass
class FitChecks:
    """What a coordinator's operator allows a Fit, and the checks that hold it to that.

    Attributes:
        code_policy: Code, checkpoints and paths a caller may name.
        packages: The uploaded packages a runtime environment may name.
        datasets: Resolves the request's dataset references.
        allow_pickled_code: Pickled train loops and preprocessors are accepted at all.
        allow_pip_installs: Runtime environments may install pip packages.
        pip_allowed_index_urls: The package indexes a pip line may name.
        capacity_wait_s: How long a Fit too big for the cluster waits for nodes to join.
        store: The coordinator's store, where runs without a ``storage_path`` write (default: the
            code policy's).
    """

    code_policy: CodePolicy
    packages: PackageService
    datasets: DatasetService
    allow_pickled_code: bool = True
    allow_pip_installs: bool = True
    pip_allowed_index_urls: tuple[str, ...] = ()
    capacity_wait_s: float = 0.0
    store: Store | None = field(default=None, repr=False)

    def check(self, request: coordinator_pb2.FitRequest, caller: Caller, *, check_capacity: bool = True) -> AdmittedRun:
        """Every check a Fit from ``caller`` passes before it is recorded; blocking (store reads, Ray).

        Carried code needs submit-code before anything in the request is looked at further.
        """
        if carried_code(request) and caller is not ANYONE:  # without tokens, every caller may do everything
            caller.require(SUBMIT_CODE)
        return self.validate(request, check_capacity=check_capacity, caller=caller)

    def validate(
        self, request: coordinator_pb2.FitRequest, *, check_capacity: bool = True, caller: Caller | None = None
    ) -> AdmittedRun:
        """Checks a Fit as ``caller`` (the RPC's caller by default) may send it; blocking (store reads).

        Returns:
            What the checks decided, for the run's controller.
        """
        caller = caller or current_caller()
        backend = get_backend(request.framework)
        check_structs(request)
        self.check_paths(request)
        if SUBMIT_CODE not in caller.scopes:
            self.code_policy.check_code_names(request)
        if not request.HasField("scaling_config"):
            request.scaling_config.num_workers = 1
        scaling_config = ScalingConfig.from_proto(request.scaling_config)
        run_config = RunConfig.from_proto(request.run_config)
        if run_config.sync_config.sync_artifacts and request.WhichOneof("trainer") != "data_parallel":
            # Declarative trainers run no user code that could write artifacts.
            raise InvalidArgumentError(
                f"sync_artifacts needs a training loop that writes artifacts; {request.framework} runs none",
                field="run_config.sync_config.sync_artifacts",
            )
        if (
            request.WhichOneof("trainer") == "data_parallel"
            and request.data_parallel.train_loop.WhichOneof("source") == "pickled_function"
            and not self.allow_pickled_code
        ):
            raise PermissionDeniedError(
                "this coordinator does not accept pickled code; send an entry point installed on the workers",
                field="data_parallel.train_loop.pickled_function",
            )
        if request.pickled_preprocessor and not self.allow_pickled_code:
            raise PermissionDeniedError(
                "this coordinator does not accept pickled preprocessors", field="pickled_preprocessor"
            )
        if request.run_config.HasField("runtime_env"):
            check_runtime_env(
                request.run_config.runtime_env,
                self.packages,
                allow_pip=self.allow_pip_installs,
                allowed_index_urls=self.pip_allowed_index_urls,
            )
        if request.HasField("preprocessor") and not request.pickled_preprocessor:
            build_preprocessor(request.preprocessor)
        datasets = {name: self.datasets.resolve(name, ref) for name, ref in request.datasets.items()}
        backend.validate(request, datasets)
        if request.resume_from_checkpoint:
            try:
                ckpt = Checkpoint(request.resume_from_checkpoint)
                exists = ckpt.filesystem.get_file_info(ckpt.path).type != pafs.FileType.NotFound
            except (ValueError, OSError):  # InvalidArgumentError, ArrowInvalid, a store that cannot be reached
                exists = False
            if not exists:
                raise InvalidArgumentError(
                    f"resume_from_checkpoint {request.resume_from_checkpoint!r} does not exist",
                    field="resume_from_checkpoint",
                )
        runner = backend.for_request(request)
        plan = placement_plan(runner, request)
        if check_capacity:
            wait_until_feasible(plan.scaling, cluster_view, self.capacity_wait_s, side=plan.side_bundles)
        return AdmittedRun(
            request=request,
            backend=runner,
            scaling_config=scaling_config,
            run_config=run_config,
            failure_config=run_config.failure_config,
            checkpoint_config=run_config.checkpoint_config or CheckpointConfig(),
            datasets=datasets,
            store=run_store(self.store or self.code_policy.store, run_config.storage_path),
            plan=plan,
        )

    def check_paths(self, request: coordinator_pb2.FitRequest) -> None:
        """Every path a Fit names lies in the store or an allowed prefix, before anything opens it."""
        policy = self.code_policy
        if request.run_config.storage_path:
            policy.check_path(request.run_config.storage_path, "run_config.storage_path")
        if request.resume_from_checkpoint:
            policy.check_path(request.resume_from_checkpoint, "resume_from_checkpoint")
        for name, ref in request.datasets.items():
            if ref.uri and not ref.uri.startswith("datasets/"):
                policy.check_path(ref.uri, f"datasets[{name}].uri")
