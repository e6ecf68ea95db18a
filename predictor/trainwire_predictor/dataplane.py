"""The predictor's data plane: one protocol-neutral object behind the gRPC and REST front ends.

It resolves models, runs inference through the batcher, keeps the statistics
and feeds the metrics; errors are the trainwire error family, which each front
end maps to its own statuses in one place. The front ends only convert their
messages to and from ``trainwire_predictor.inference`` (as MLServer's
``grpc/servicers.py`` and ``rest/endpoints.py`` sit on ``handlers/dataplane.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from trainwire_predictor import __version__
from trainwire_predictor.batching import Batcher
from trainwire_predictor.generative.requests import GenerateLimits
from trainwire_predictor.generative.service import TextGenerator
from trainwire_predictor.inference import InferenceRequest, InferenceResponse
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.models import TensorSpec
from trainwire_predictor.routing import Router
from trainwire_predictor.statistics import ModelStats, Recorder, Recorders, Statistics, Timing, now_ns

T = TypeVar("T")

SERVER_NAME = "trainwire-predictor"
# The Open Inference Protocol extensions both front ends offer.
EXTENSIONS = ("model_repository", "statistics", "generate")


@dataclass(frozen=True)
class ModelMetadata:
    """What ModelMetadata and ``GET /v2/models/{m}`` answer."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


@dataclass(frozen=True)
class IndexEntry:
    """One committed checkpoint in the repository index."""

    name: str
    version: str
    state: str
    reason: str


class DataPlane:
    """Model resolution, inference, statistics and the repository, for every front end.

    Args:
        models: Resolution and the loaded-model cache.
        batcher: Runs model compute off the event loop, batching concurrent requests where safe.
        statistics: What the statistics extension answers from (default: a new, empty one).
        recorders: Also told of every request and model call (e.g. the Prometheus metrics).
        router: Follows each model's traffic policy (weights, sticky keys, shadow); default: one
            without Prometheus metrics.
        generate_limits: What one generation may ask for (language models' token streams).
    """

    def __init__(
        self,
        models: ModelRepository,
        batcher: Batcher,
        statistics: Statistics | None = None,
        recorders: list[Recorder] | None = None,
        router: Router | None = None,
        generate_limits: GenerateLimits | None = None,
    ) -> None:
        self.models = models
        self.router = router if router is not None else Router(models)
        self.batcher = batcher
        self.statistics = statistics if statistics is not None else Statistics()
        self.recorder = Recorders([self.statistics, *(recorders or [])])
        if batcher.recorder is None:
            batcher.recorder = self.recorder
        self.generator = TextGenerator(self.router, self.recorder, generate_limits or GenerateLimits())
        self.version = __version__

    async def infer(self, request: InferenceRequest, encode: Callable[[InferenceResponse], T]) -> T:
        """Scores one request and encodes the answer with the front end's ``encode``.

        A request that names no version follows its model's traffic policy (and sends the
        policy's shadow a copy once the answer is ready). The encoding counts as the
        request's output time, and a failure anywhere after the model was found counts
        as a failed request of that model.

        Raises:
            TrainwireError: The model is not found (counted for no model, as in Triton),
                or the request is bad (the field names where).
        """
        timing = Timing()
        # Fresh cached reads answer without awaiting: nearly every request.
        request, shadow, model = self.router.target_now(request) or await self.router.target(request)
        try:
            model.in_flight += 1  # the cache keeps a model while it scores (LoadedModel.serving, inlined)
            try:
                response = await self.batcher.infer(request, model, timing)
            finally:
                model.in_flight -= 1
            started = now_ns()
            encoded = encode(response)
            timing.output_ns += now_ns() - started
        except Exception:
            self.recorder.failure(model.ref, now_ns() - timing.start_ns)
            raise
        self.recorder.success(model.ref, timing, now_ns() - timing.start_ns)
        if shadow:
            self.router.shadow(request, shadow, response)
        return encoded

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the model resolves and loads (loading it if it is not loaded yet)."""
        try:
            await self.models.get(name, version)
        except (NotFoundError, FailedPreconditionError):
            return False
        return True

    async def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        """The model's versions, platform, inputs and outputs (loading it)."""
        model = await self.models.get(name, version)
        return ModelMetadata(name, model.ref.versions, model.platform, model.inputs, model.outputs)

    async def model_statistics(self, name: str = "", version: str = "") -> list[ModelStats]:
        """Statistics of every model (no name), every version of one model, or one version.

        Raises:
            InvalidArgumentError: A version without a model name.
            NotFoundError: The name or version does not exist (it need not be loaded).
        """
        if not name:
            if version:
                raise InvalidArgumentError("a version needs a model name", field="version")
            return self.statistics.records()
        ref = await self.models.resolve(name, version)
        stats = self.statistics.records(ref.run_id, version and ref.checkpoint_id, name)
        return stats or [self.statistics.zero(ref, name)]

    async def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Every committed checkpoint in the store and whether it is loaded here."""
        return [
            IndexEntry(
                ref.run_name or ref.run_id,
                ref.checkpoint_id,
                "READY" if loaded else "UNAVAILABLE",
                "" if loaded else "not loaded",
            )
            for ref, loaded in await self.models.index()
            if loaded or not ready_only
        ]

    async def load(self, name: str, version: str = "") -> None:
        """Loads a model version (its best or latest when none is named)."""
        await self.models.get(name, version)

    async def unload(self, name: str, version: str = "") -> None:
        """Drops one loaded version of a model, or every one when no version is named."""
        await self.models.unload(name, version)
