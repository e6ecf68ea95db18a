"""What the coordinator and the worker runtime agree on, so that neither imports the other.

The coordinator places one actor per rank of the class the worker runtime registers
in the ``trainwire.worker_runtime`` entry-point group (as ``actor``; the coordinator's
placement finds it), calls ``check_framework(name)`` on each, then ``run(WorkerRun)``. The
actor finds the framework's training function in its own registry
(``trainwire.worker_backends``), and runs the functions the coordinator's backends send it
(``execute``) as ``fn(actor, *args)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainwire_core.tls import ClientTLS

WORKER_RUNTIME_GROUP = "trainwire.worker_runtime"


@dataclass(frozen=True)
class WorkerRun:
    """Everything one rank needs to run one attempt of a run.

    Args:
        framework: The framework whose training function runs (its worker backend's name).
        request_bytes: The serialized ``FitRequest``.
        context: The rank's ``trainwire.train.session.TrainContext``.
        coordinator_address: Where the report stream goes.
        report_secret: The run's secret on the report stream.
        report_tls: How to verify the coordinator (None: plaintext).
        store_uri: The shared store's root.
        checkpoint_uri: The checkpoint to resume from ("" for none).
        dataset_shards: This rank's dataset shards by name (Ray Data iterators or ``ShardSpec``s).
        next_report_index: The index the rank's first report takes.
        log_max_bytes: The most of the rank's output the store keeps per attempt (0: all).
    """

    framework: str
    request_bytes: bytes
    context: Any
    coordinator_address: str
    report_secret: str = ""
    report_tls: ClientTLS | None = None
    store_uri: str = ""
    checkpoint_uri: str = ""
    dataset_shards: dict[str, Any] = field(default_factory=dict)
    next_report_index: int = 0
    log_max_bytes: int = 64 << 20
