"""The coordinator's gRPC server: Coordinator + WorkerReports + ModelRegistry + Tuner, health, reflection."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import ray

from trainwire_coordinator.admission.code_policy import CodePolicy
from trainwire_coordinator.admission.datasets import DatasetService
from trainwire_coordinator.admission.runtime_envs import PackageService
from trainwire_coordinator.integrations.mlflow_tracker import MlflowTracker
from trainwire_coordinator.integrations.model_registry import ModelRegistry, ModelRegistryServicer
from trainwire_coordinator.metadata import open_metadata_store
from trainwire_coordinator.run_manager import RunManager
from trainwire_coordinator.servicer import CoordinatorServicer, WorkerReportsServicer
from trainwire_coordinator.settings import CoordinatorSettings
from trainwire_coordinator.tune.manager import TuneManager
from trainwire_coordinator.tune.servicer import TunerServicer
from trainwire_core.auth import ANY_TOKEN, CANCEL, READ, SERVE, SUBMIT, SUBMIT_CODE, TokenTable, add_auth_arguments
from trainwire_core.serving import (
    KEEPALIVE_SERVER_OPTIONS,
    BearerTokenInterceptor,
    MetricsServer,
    OpenDoorError,
    ServerThread,
    add_health_and_reflection,
    advertised_address,
    check_door,
    mark_serving,
    message_size_options,
    serve_until_signalled,
)
from trainwire_core.storage import Store
from trainwire_core.tls import ClientTLS, add_port, add_tls_arguments
from trainwire_core.v1 import (
    coordinator_pb2,
    coordinator_pb2_grpc,
    models_pb2,
    models_pb2_grpc,
    tune_pb2,
    tune_pb2_grpc,
    worker_reports_pb2,
    worker_reports_pb2_grpc,
)

logger = logging.getLogger(__name__)

SERVICE_NAMES = (
    coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name,
    worker_reports_pb2.DESCRIPTOR.services_by_name["WorkerReports"].full_name,
    models_pb2.DESCRIPTOR.services_by_name["ModelRegistry"].full_name,
    tune_pb2.DESCRIPTOR.services_by_name["Tuner"].full_name,
)
# The services callers need a token for (workers' report streams carry their own secret).
PROTECTED_SERVICES = (SERVICE_NAMES[0], SERVICE_NAMES[2], SERVICE_NAMES[3])


def join_ray_node(address: str, timeout_s: float = 120.0) -> subprocess.Popen:
    """Starts a Ray node without CPUs or GPUs joined to ``address`` (stopped at exit)."""
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    command = [ray_cli, "start", "--block", f"--address={address}", "--num-cpus=0", "--num-gpus=0"]
    if os.environ.get("RAY_TMPDIR"):
        # Ray gives a joining node the head's directory unless told otherwise; RAY_TMPDIR names
        # this host's own, as it does for a head.
        command.append(f"--temp-dir={os.path.join(os.environ['RAY_TMPDIR'], 'ray')}")
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    atexit.register(_stop_node, proc)
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        sys.stdout.write(line)
        if "Ray runtime started" in line:
            threading.Thread(target=sys.stdout.writelines, args=(proc.stdout,), daemon=True).start()
            return proc
        if time.monotonic() > deadline:
            break
    _stop_node(proc)
    raise RuntimeError(f"the Ray node joining {address} did not start (ray start exited with {proc.poll()})")


def _stop_node(proc: subprocess.Popen) -> None:
    """Stops the node's process group (ray start, raylet, its workers): SIGTERM, then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue


def ensure_ray(settings: CoordinatorSettings) -> None:
    """Connects to the configured Ray cluster (as a node of it with ``ray_join_node``), or starts a local one."""
    if ray.is_initialized():
        return
    if settings.ray_join_node and settings.ray_address:
        join_ray_node(settings.ray_address)
    kwargs = {"num_cpus": settings.ray_num_cpus} if settings.ray_num_cpus and not settings.ray_address else {}
    ray.init(address=settings.ray_address or None, include_dashboard=False, log_to_driver=True, **kwargs)


# The scope each Coordinator method needs (a Fit that carries code needs submit-code too).
METHOD_SCOPES = {
    "Fit": SUBMIT,
    "UploadPackage": SUBMIT_CODE,
    "GetPackage": READ,
    "WatchLogs": READ,
    "UploadDataset": SUBMIT,
    "UploadCheckpoint": SUBMIT,
    "GetRun": READ,
    "ListRuns": READ,
    "WatchRun": READ,
    "WatchRunBatched": READ,
    "GetDataset": READ,
    "DownloadCheckpoint": READ,
    "CancelRun": CANCEL,
    "GetCaller": ANY_TOKEN,
    # ModelRegistry: what predictors serve is moved with serve.
    "SetAlias": SERVE,
    "DeleteAlias": SERVE,
    "SetRoute": SERVE,
    "GetAliases": READ,
    "GetRoute": READ,
    # Tuner: a search's trials are fits (a search that carries code needs submit-code too).
    "Tune": SUBMIT,
    "GetTune": READ,
    "ListTunes": READ,
    "WatchTune": READ,
    "CancelTune": CANCEL,
    # Runs a search's failed trials again (its code too: submit-code when it carries code).
    "ResumeTune": SUBMIT,
}


class CoordinatorServer:
    """One coordinator: the gRPC server and the run manager behind it."""

    def __init__(self, settings: CoordinatorSettings) -> None:
        self.settings = settings
        self.address = ""
        self.server: grpc.aio.Server | None = None
        self.runs: RunManager | None = None
        self.tunes: TuneManager | None = None
        self.metrics_server: MetricsServer | None = None
        self.metrics_address = ""
        self.tracker: MlflowTracker | None = None

    async def start(self) -> str:
        """Binds the port (0 picks a free one) and returns ``host:port``.

        Raises:
            OpenDoorError: Bound beyond loopback without a token (and not told to allow it).
        """
        settings = self.settings
        check_door(
            "the coordinator",
            settings.host,
            settings.auth_token or settings.tokens,
            settings.allow_unauthenticated,
            "TRAINWIRE_COORDINATOR_AUTH_TOKEN",
        )
        await asyncio.to_thread(ensure_ray, settings)
        if settings.embedded_owner and not settings.ray_address:
            # The program that embeds this coordinator joins its Ray instead of starting another.
            print(f"trainwire coordinator ray {ray.get_runtime_context().gcs_address}", flush=True)
        store = Store(settings.store)
        metadata = open_metadata_store(settings.state)
        tokens = TokenTable.from_settings(settings.auth_token, settings.tokens)
        self.runs = RunManager(
            metadata,
            store,
            DatasetService(store),
            "",
            allow_pickled_code=settings.allow_pickled_code,
            packages=PackageService(store, settings.max_package_bytes),
            allow_pip_installs=settings.allow_pip_installs,
            watch_poll_s=settings.watch_poll_s,
            pending_reason_after_s=settings.pending_reason_after_s,
            capacity_wait_s=settings.capacity_wait_s,
            worker_pool_idle_s=settings.worker_pool_idle_s,
            report_key=settings.report_key,
            report_tls=report_tls(settings),
            stall_reason_after_s=settings.stall_reason_after_s,
            stall_fail_after_s=settings.stall_fail_after_s,
            embedded_owner=settings.embedded_owner,
            log_max_bytes=settings.log_max_bytes_per_rank,
            materialize_below_bytes=settings.materialize_datasets_below_bytes,
            code_policy=CodePolicy(store, settings.allowed_estimator_classes, settings.allowed_path_prefixes),
            pip_allowed_index_urls=settings.pip_allowed_index_urls,
            authenticated=bool(tokens),
        )
        if settings.mlflow_uri:
            # Sees every run event as it is stored; MLflow's calls run on the tracker's thread.
            self.tracker = MlflowTracker(
                settings.mlflow_uri, metadata, max_artifact_bytes=settings.mlflow_max_artifact_bytes
            )
            self.runs.events.observers.append(self.tracker.observe)
        registry = ModelRegistry(store)
        if self.tracker is not None:
            # Alias moves mirrored as MLflow registry aliases, on the same tracker thread.
            registry.observers.append(self.tracker.observe_alias)
        interceptors = [BearerTokenInterceptor(tokens, PROTECTED_SERVICES, METHOD_SCOPES)] if tokens else []
        self.server = grpc.aio.server(
            options=[*message_size_options(settings.max_message_bytes), *KEEPALIVE_SERVER_OPTIONS],
            interceptors=interceptors,
        )
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(self.runs), self.server)
        worker_reports_pb2_grpc.add_WorkerReportsServicer_to_server(WorkerReportsServicer(self.runs), self.server)
        models_pb2_grpc.add_ModelRegistryServicer_to_server(ModelRegistryServicer(registry), self.server)
        self.tunes = TuneManager(self.runs, metadata)
        tune_pb2_grpc.add_TunerServicer_to_server(TunerServicer(self.tunes), self.server)
        health_servicer = add_health_and_reflection(self.server, SERVICE_NAMES)
        port = add_port(
            self.server, f"{settings.host}:{settings.port}", settings.tls_cert, settings.tls_key, settings.tls_client_ca
        )
        await self.server.start()
        await mark_serving(health_servicer, SERVICE_NAMES)
        self.address = settings.advertise_address or advertised_address(
            settings.host, port, ray.util.get_node_ip_address
        )
        self.runs.listen_at(self.address)
        if settings.metrics_port:
            self.metrics_server = MetricsServer(self.runs.metrics.registry, settings.host, settings.metrics_port)
            self.metrics_address = advertised_address(settings.host, self.metrics_server.port)
            logger.info("Prometheus metrics on http://%s/metrics", self.metrics_address)
        # Once workers can reach this coordinator: runs a previous one left active carry on.
        await self.runs.recover()
        await self.tunes.recover()
        return self.address

    async def stop(self, grace_s: float = 5.0) -> None:
        if self.tunes is not None:
            await self.tunes.shutdown()
        if self.runs is not None:
            await self.runs.shutdown()
        if self.server is not None:
            await self.server.stop(grace_s)
        if self.tracker is not None:
            await asyncio.to_thread(self.tracker.close)
        if self.runs is not None:
            self.runs.metadata.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()


def report_tls(settings: CoordinatorSettings) -> ClientTLS | None:
    """How workers verify this coordinator; under mutual TLS they present its own certificate."""
    if not settings.tls_cert:
        return None
    mutual = bool(settings.tls_client_ca)
    return ClientTLS(
        ca=Path(settings.tls_ca or settings.tls_cert).read_bytes(),
        cert=Path(settings.tls_cert).read_bytes() if mutual else b"",
        key=Path(settings.tls_key).read_bytes() if mutual else b"",
    )


class CoordinatorThread(ServerThread):
    """A coordinator on its own event loop in a background thread (tests, embedding)."""

    def __init__(self, settings: CoordinatorSettings) -> None:
        super().__init__(CoordinatorServer(settings), "trainwire-coordinator")


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="trainwire coordinator", description="Run the trainwire coordinator.")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, help="0 picks a free port")
    parser.add_argument("--store", help="shared store URI (file://, s3://) or path")
    parser.add_argument("--state", help="metadata store: SQLite path or redis:// URL")
    parser.add_argument("--ray-address", help="Ray cluster to join; default: start a local one")
    parser.add_argument("--ray-num-cpus", type=int)
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (0: off)")
    parser.add_argument(
        "--exit-with-parent", action="store_true", help="stop when standard input closes (embedded use)"
    )
    add_auth_arguments(parser)
    add_tls_arguments(parser)
    args = parser.parse_args(argv)
    exit_with_parent = vars(args).pop("exit_with_parent")
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(
            serve_until_signalled(
                CoordinatorServer(CoordinatorSettings(**overrides)),
                "trainwire coordinator",
                ray.shutdown,
                stop_with_parent=exit_with_parent,
            )
        )
    except OpenDoorError as exc:
        raise SystemExit(f"error: {exc}") from None
