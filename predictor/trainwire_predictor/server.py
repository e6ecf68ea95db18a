"""The predictor's servers: gRPC (GRPCInferenceService, health, reflection) and REST, on one data plane."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import grpc
import uvloop

from trainwire_core.auth import ADMIN, PREDICT, TokenTable, add_auth_arguments
from trainwire_core.inference import grpc_service_pb2, grpc_service_pb2_grpc
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
from trainwire_core.tls import add_port, add_tls_arguments
from trainwire_predictor.batching import Batcher, parse_batching, prepare_batched
from trainwire_predictor.dataplane import DataPlane
from trainwire_predictor.generative.requests import GenerateLimits
from trainwire_predictor.grpc.servicer import InferenceServicer
from trainwire_predictor.metrics import PredictorMetrics
from trainwire_predictor.mlflow_models import MlflowModels
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.model_repository_dir import ModelDirectory
from trainwire_predictor.rest.endpoints import RestFrontEnd
from trainwire_predictor.rest.server import RestServer
from trainwire_predictor.routing import Router
from trainwire_predictor.settings import PredictorSettings
from trainwire_predictor.statistics import SharedStatistics
from trainwire_predictor.workers import (
    ROLE_ENV,
    SETTINGS_ENV,
    GenerationPublisher,
    WorkerRole,
    run_group,
    with_pid_header,
)

logger = logging.getLogger(__name__)

SERVICE_NAME = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name


class PredictorServer:
    """One stateless predictor: the gRPC server and the model cache behind it.

    Args:
        settings: Its settings.
        role: Set in a worker of a ``--workers N`` group (workers.py): ports shared with
            ``SO_REUSEPORT``, statistics and metrics written where the group sums them.
    """

    def __init__(self, settings: PredictorSettings, role: WorkerRole | None = None) -> None:
        self.settings = settings
        self.role = role
        self.generation_publisher: GenerationPublisher | None = None
        self.address = ""
        self.server: grpc.aio.Server | None = None
        self.models: ModelRepository | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.dataplane: DataPlane | None = None
        self.servicer: InferenceServicer | None = None
        self.metrics: PredictorMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        self.metrics_address = ""
        self.rest: RestServer | None = None
        self.http_address = ""

    async def start(self) -> str:
        """Binds the port (0 picks a free one) and returns ``host:port``.

        Raises:
            OpenDoorError: Bound beyond loopback without a token (and not told to allow it).
        """
        settings = self.settings
        check_door(
            "the predictor",
            settings.host,
            settings.auth_token or settings.tokens,
            settings.allow_unauthenticated,
            "TRAINWIRE_PREDICTOR_AUTH_TOKEN",
        )
        store = await asyncio.to_thread(Store, settings.store)
        batching = parse_batching(settings.dynamic_batching)
        self.models = ModelRepository(
            store,
            cache_size=settings.model_cache_size,
            cache_bytes=settings.model_cache_bytes,
            index_refresh_s=settings.index_refresh_s,
            prepare=prepare_batched(batching),
            compile_tree_models=settings.compile_tree_models,
            mlflow=mlflow_models(settings),
            directory=model_directory(settings),
        )
        self.executor = ThreadPoolExecutor(max(1, settings.worker_threads), thread_name_prefix="trainwire-predict")
        tokens = TokenTable.from_settings(settings.auth_token, settings.tokens)
        # Inference and model queries need predict; loading and unloading models, admin; so does
        # (un)registering shared memory, which has the predictor map a host object the caller names.
        scopes = {
            name: ADMIN
            for name in ("RepositoryModelLoad", "RepositoryModelUnload")
            + ("SystemSharedMemoryRegister", "SystemSharedMemoryUnregister")
            + ("CudaSharedMemoryRegister", "CudaSharedMemoryUnregister")
        }
        interceptors = [BearerTokenInterceptor(tokens, (SERVICE_NAME,), scopes, PREDICT)] if tokens else []
        # A group's workers bind one port each (grpc's default on Linux; said here, not assumed).
        reuse_port = [("grpc.so_reuseport", 1)] if self.role is not None else []
        self.server = grpc.aio.server(
            options=[*message_size_options(settings.max_message_bytes), *KEEPALIVE_SERVER_OPTIONS, *reuse_port],
            interceptors=interceptors,
        )
        role = self.role
        self.metrics = PredictorMetrics() if settings.metrics_port or (role and role.metrics) else None
        self.dataplane = DataPlane(
            self.models,
            Batcher(
                self.executor,
                inline_budget_ns=int(settings.inline_budget_us * 1000),
                batching=batching,
            ),
            statistics=SharedStatistics(role.statistics_dir) if role is not None else None,
            recorders=[self.metrics] if self.metrics else [],
            router=Router(
                self.models,
                max_shadow_inflight=settings.shadow_max_inflight,
                shadow_threads=settings.shadow_threads,
                registry=self.metrics.registry if self.metrics else None,
            ),
            generate_limits=GenerateLimits(
                settings.generate_max_tokens,
                settings.generate_default_max_tokens,
                settings.generate_max_batch,
                settings.generate_max_waiting,
                settings.generate_timeout_s,
                settings.generate_threads,
                settings.generate_max_prompt_chars,
                settings.generate_max_prompt_tokens,
                settings.generate_max_waiting_per_tenant,
                settings.generate_prefix_cache_bytes,
                settings.generate_lora_bytes,
                settings.generate_pack_weights,
            ),
        )
        if self.metrics is not None:
            generation = self.metrics.watch_generation(self.dataplane.generator.engines)
            if role is not None:
                self.generation_publisher = GenerationPublisher(generation, role.generation_file)
                self.generation_publisher.start()
        self.servicer = InferenceServicer(dataplane=self.dataplane)
        grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self.servicer, self.server)
        health_servicer = add_health_and_reflection(self.server, (SERVICE_NAME,), grpc_service_pb2.DESCRIPTOR)
        port = add_port(
            self.server, f"{settings.host}:{settings.port}", settings.tls_cert, settings.tls_key, settings.tls_client_ca
        )
        if self.metrics is not None and settings.metrics_port:
            self.metrics_server = MetricsServer(self.metrics.registry, settings.host, settings.metrics_port)
            self.metrics_address = advertised_address(settings.host, self.metrics_server.port)
            logger.info("Prometheus metrics on http://%s/metrics", self.metrics_address)
        if settings.http_port is not None:
            front_end = RestFrontEnd(self.dataplane, tokens, settings.max_message_bytes, settings.mlflow_default_model)
            self.rest = RestServer(
                front_end,
                settings.host,
                settings.http_port,
                settings.tls_cert,
                settings.tls_key,
                settings.tls_client_ca,
                reuse_port=role is not None,
            )
            if role is not None:
                self.rest.config.app = with_pid_header(self.rest.config.app)
            self.http_address = advertised_address(settings.host, await self.rest.start())
            logger.info("Open Inference Protocol over REST on %s", self.http_address)
        await self.server.start()
        await mark_serving(health_servicer, (SERVICE_NAME,))
        self.address = advertised_address(settings.host, port)
        return self.address

    async def stop(self, grace_s: float = 5.0) -> None:
        if self.generation_publisher is not None:
            self.generation_publisher.stop()
        if self.rest is not None:
            await self.rest.stop(grace_s)
            self.rest = None
        if self.metrics_server is not None:
            await asyncio.to_thread(self.metrics_server.stop)
            self.metrics_server = None
        if self.server is not None:
            await self.server.stop(grace_s)
        if self.dataplane is not None:
            self.dataplane.router.close()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


def mlflow_models(settings: PredictorSettings) -> MlflowModels | None:
    """The MLflow models the settings name (None: none).

    Raises:
        ValueError: ``mlflow_models`` is neither a JSON object nor a file holding one.
    """
    served_text = settings.mlflow_models.strip()
    if not settings.mlflow_uri and not served_text:
        return None
    if served_text and not served_text.startswith("{"):
        with open(served_text) as f:
            served_text = f.read()
    served = json.loads(served_text) if served_text else {}
    if not isinstance(served, dict) or not all(isinstance(v, str) for v in served.values()):
        raise ValueError("TRAINWIRE_PREDICTOR_MLFLOW_MODELS must be a JSON object of served name -> model URI")
    return MlflowModels(
        settings.mlflow_uri,
        served,
        trust_pickles=settings.mlflow_trust_pickles,
        trust_code=settings.mlflow_trust_code,
    )


def model_directory(settings: PredictorSettings) -> ModelDirectory | None:
    """The model repository directory the settings name (None: none).

    Raises:
        ValueError: A local directory that does not exist.
    """
    if not settings.model_repository:
        return None
    return ModelDirectory(
        settings.model_repository,
        trust_pickles=settings.model_repository_trust_pickles,
        refresh_s=settings.index_refresh_s,
        # Folders pointing at MLflow models (mlflow deployments) follow the MLflow settings.
        mlflow_uri=settings.mlflow_uri,
        mlflow_trust_pickles=settings.mlflow_trust_pickles,
        mlflow_trust_code=settings.mlflow_trust_code,
    )


class PredictorThread(ServerThread):
    """A predictor on its own event loop in a background thread (tests, embedding)."""

    def __init__(self, settings: PredictorSettings) -> None:
        super().__init__(PredictorServer(settings), "trainwire-predictor")

    @property
    def models(self) -> ModelRepository:
        assert self.server.models is not None
        return self.server.models


def main(argv: list[str] | None = None) -> None:
    """``trainwire predictor``: serves the store's committed checkpoints over the Open Inference Protocol."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="trainwire predictor",
        description="Serve committed checkpoints over the Open Inference Protocol (gRPC, and REST with --http-port).",
    )
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, help="gRPC port; 0 picks a free port (default 8001)")
    parser.add_argument("--http-port", type=int, help="also serve REST (KServe v2) on this port; 0 picks a free one")
    parser.add_argument("--store", help="shared store URI (file://, s3://) or path")
    parser.add_argument("--max-message-bytes", type=int)
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics over HTTP on this port (0: off)")
    parser.add_argument("--model-cache-size", type=int, help="loaded checkpoints kept in memory")
    parser.add_argument("--worker-threads", type=int, help="threads running model compute")
    parser.add_argument("--workers", type=int, help="predictor processes sharing the ports (default 1)")
    parser.add_argument("--index-refresh-s", type=float, help="how often a run's checkpoint index is re-read")
    parser.add_argument("--mlflow-uri", help="serve this MLflow tracking server's registered models as mlflow:<name>")
    parser.add_argument("--mlflow-models", help="served name -> MLflow model URI: a JSON object or a file holding one")
    parser.add_argument(
        "--model-repository", help="also serve a model repository laid out as Triton's: a directory or s3:// URI"
    )
    parser.add_argument(
        "--auth-token",
        help="require 'authorization: Bearer <token>' on inference calls (or TRAINWIRE_PREDICTOR_AUTH_TOKEN)",
    )
    add_auth_arguments(parser)
    add_tls_arguments(parser)
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    # OpenMP threads (torch, TensorFlow) that finish a call sleep instead of spinning for the
    # next: they share the cores with the event loop, whose work between calls they would slow.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = PredictorSettings(**overrides)
    try:
        if settings.workers > 1:
            run_group(settings)
            return
        server = PredictorServer(settings)
        # uvloop: the faster loop for uvicorn, and grpc.aio runs on it too.
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_until_signalled(server, "trainwire predictor"))
    except OpenDoorError as exc:
        raise SystemExit(f"error: {exc}") from None


def worker_main() -> None:
    """One worker of a ``--workers N`` group (workers.py starts it with its settings in the environment)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = PredictorSettings.model_validate_json(os.environ[SETTINGS_ENV])
    role = WorkerRole.from_env(os.environ[ROLE_ENV])
    server = PredictorServer(settings, role)
    banner = f"trainwire predictor worker {role.index} (pid {os.getpid()})"
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_until_signalled(server, banner, stop_with_parent=True))
    except OpenDoorError as exc:
        raise SystemExit(f"error: {exc}") from None
