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
from typing import Any, TypeVar

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from trainwire_predictor import __version__
from trainwire_predictor.batching import Batcher, DynamicBatching
from trainwire_predictor.generative.requests import GenerateLimits
from trainwire_predictor.generative.service import TextGenerator, language_model
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, raw_bytes
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.models import TensorSpec
from trainwire_predictor.routing import Router
from trainwire_predictor.shared_memory import SharedMemoryRef, SharedMemoryRegistry
from trainwire_predictor.statistics import ModelStats, Recorder, Recorders, Statistics, Timing, now_ns

T = TypeVar("T")

SERVER_NAME = "trainwire-predictor"
# The Open Inference Protocol extensions both front ends offer.
EXTENSIONS = ("model_repository", "statistics", "model_configuration", "system_shared_memory", "generate")


@dataclass(frozen=True)
class ModelMetadata:
    """What ModelMetadata and ``GET /v2/models/{m}`` answer."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


@dataclass(frozen=True)
class ModelConfiguration:
    """What Triton's model configuration extension answers: how the predictor serves one model version.

    Attributes:
        name: The model name asked for.
        version: The version's number (its checkpoint id where the index has no numbers).
        platform: The framework's declared platform; ``backend`` its name.
        max_batch_size: The most rows one model call takes; 0 where the model's inputs have no
            batch dimension (then ``inputs`` keep their whole shapes).
        inputs: Tensors of one request row (the batch dimension left out when ``max_batch_size`` > 0).
        outputs: Likewise.
        dynamic_batching: The batching policy applied (None: each request alone, or joined at once).
        instances: Model calls that may run at the same time.
        decoupled: Whether answers stream (a language model's tokens).
    """

    name: str
    version: str
    platform: str
    backend: str
    max_batch_size: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    dynamic_batching: DynamicBatching | None
    instances: int
    decoupled: bool


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
        self.shared_memory = SharedMemoryRegistry()

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
            if request.shared_memory:
                self._read_shared_inputs(request)
            model.in_flight += 1  # the cache keeps a model while it scores (LoadedModel.serving, inlined)
            try:
                response = await self.batcher.infer(request, model, timing)
            finally:
                model.in_flight -= 1
            if request.output_regions:
                self._write_shared_outputs(request.output_regions, response)
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

    def _read_shared_inputs(self, request: InferenceRequest) -> None:
        """Replaces each input placed in shared memory by a copy of its bytes (bounds checked)."""
        for tensor in request.inputs:
            if isinstance(tensor.data, SharedMemoryRef):
                tensor.data = self.shared_memory.read(tensor.data)

    def _write_shared_outputs(self, regions: dict[str, SharedMemoryRef], response: InferenceResponse) -> None:
        """Writes the outputs asked for in shared memory there; the answer then carries only their metadata."""
        for name, arr in response.outputs:
            ref = regions.get(name)
            if ref is not None:
                self.shared_memory.write(ref, raw_bytes(arr))
        response.output_regions = regions

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

    async def model_config(self, name: str, version: str = "") -> ModelConfiguration:
        """The configuration the predictor applies to a model version (loading it)."""
        model = await self.models.get(name, version)
        policy = None if model.predictor.batch_invariant else self.batcher.batching(model)
        batched = all(spec.shape[:1] == (-1,) for spec in (*model.inputs, *model.outputs))
        own = getattr(model.predictor, "scheduling", None)  # a repository model's config.pbtxt, as applied
        if not batched:
            rows = 0
        elif own is not None:
            rows = own.max_batch_size
        elif model.predictor.batch_invariant:
            rows = self.batcher.max_rows
        else:
            rows = policy.max_batch_size if policy is not None else 1
        cut = 1 if rows else 0
        return ModelConfiguration(
            name=name,
            version=model.ref.number_text or model.ref.checkpoint_id,
            platform=model.platform,
            backend=model.framework,
            max_batch_size=rows,
            inputs=[TensorSpec(s.name, s.datatype, s.shape[cut:]) for s in model.inputs],
            outputs=[TensorSpec(s.name, s.datatype, s.shape[cut:]) for s in model.outputs],
            dynamic_batching=policy,
            instances=(own and own.instances) or (policy.instances if policy is not None else self.batcher.threads),
            decoupled=language_model(model) is not None,
        )

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
                ref.number_text or ref.checkpoint_id,
                "READY" if loaded else "UNAVAILABLE",
                "" if loaded else self.models.unavailable_reason(ref),
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


def triton_data_type(datatype: str) -> str:
    """Triton's DataType name of an Open Inference Protocol datatype (BYTES is TYPE_STRING)."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def triton_dims(shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Triton's dims of a row's shape, and the reshape it needs: a scalar per row is dims [1], reshaped to []."""
    return ((1,), ()) if not shape else (shape, None)


def _tensor_json(spec: TensorSpec) -> dict[str, Any]:
    dims, reshape = triton_dims(spec.shape)
    doc: dict[str, Any] = {"name": spec.name, "data_type": triton_data_type(spec.datatype), "dims": list(dims)}
    if reshape is not None:
        doc["reshape"] = {"shape": list(reshape)}
    return doc


def config_json(config: ModelConfiguration) -> dict[str, Any]:
    """The configuration as Triton's ``GET /v2/models/{m}/config`` answers it (integers as numbers)."""
    doc: dict[str, Any] = {
        "name": config.name,
        "platform": config.platform,
        "backend": config.backend,
        "version_policy": {"all": {}},
        "max_batch_size": config.max_batch_size,
        "input": [_tensor_json(s) for s in config.inputs],
        "output": [_tensor_json(s) for s in config.outputs],
        "instance_group": [{"name": config.name, "count": config.instances, "kind": "KIND_CPU"}],
        "parameters": {"version": {"string_value": config.version}},
        "model_transaction_policy": {"decoupled": config.decoupled},
    }
    if config.dynamic_batching is not None:
        doc["dynamic_batching"] = {
            "preferred_batch_size": list(config.dynamic_batching.preferred_batch_sizes),
            "max_queue_delay_microseconds": config.dynamic_batching.max_queue_delay_us,
        }
    return doc
