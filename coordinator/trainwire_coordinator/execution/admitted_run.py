"""What admission hands execution: a Fit checked once, with everything decided from its request.

Admission (``admission.fit_checks.FitChecks.validate``) builds an ``AdmittedRun``; the
controller, its datasets and a search's trials take it and read the decisions from it, never
from the request again. The type lives here, beside its readers, because the coordinator's
import contract runs one way (admission -> execution).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainwire.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from trainwire_coordinator.backends import CoordinatorBackend
from trainwire_coordinator.execution.placement import PlacementPlan
from trainwire_core.dataset_schema import DatasetSchema
from trainwire_core.storage import Store
from trainwire_core.v1 import coordinator_pb2


@dataclass(frozen=True, eq=False)
class AdmittedRun:
    """A Fit that passed every check, and what the checks decided.

    Attributes:
        request: The checked request (as recorded in the run).
        backend: The framework's coordinator half that runs it (``CoordinatorBackend.for_request``).
        scaling_config: The request's scaling, parsed.
        run_config: The request's run config, parsed.
        failure_config: The restart policy's config (the run config's).
        checkpoint_config: The retention config (the run config's, else the default).
        datasets: The request's datasets, resolved, by name.
        store: The store the run writes to (``RunConfig.storage_path``, else the coordinator's).
        plan: Where its groups are placed.
    """

    request: coordinator_pb2.FitRequest
    backend: CoordinatorBackend
    scaling_config: ScalingConfig
    run_config: RunConfig
    failure_config: FailureConfig
    checkpoint_config: CheckpointConfig
    datasets: Mapping[str, DatasetSchema]
    store: Store
    plan: PlacementPlan
