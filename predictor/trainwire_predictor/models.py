"""What the model repository hands out: model references, loaded models and resolutions.

Plain data the request path reads on every request (the batcher, the codecs, the
statistics, the router), kept apart from the repository's reads, cache and loading.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwire.predictor import Predictor
from trainwire_core import frameworks
from trainwire_core.store_documents import TrafficPolicy
from trainwire_predictor.compiled_trees import CompileResult


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output as ModelMetadata shows it (-1: any size)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelRef:
    """One committed checkpoint of one run."""

    run_id: str
    run_name: str
    checkpoint_id: str
    versions: tuple[str, ...] = ()
    # Its number in the run (1, 2, ... in commit order): the integer version Triton's tools read.
    number: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.run_id, self.checkpoint_id)

    @property
    def number_text(self) -> str:
        """Its integer version as text ("" where the index has no numbers)."""
        return str(self.number) if self.number > 0 else ""


@dataclass(frozen=True)
class Resolution:
    """What a model name means until ``fresh_until``: built once per refresh, and what the router takes.

    Every field is plain data, so the request path reads it without calling back in here.

    Attributes:
        name: The model name a request gave.
        run_id: The run it names.
        run_name: That run's name.
        versions: The committed checkpoint ids in commit order.
        checkpoints: Checkpoint id, number, alias or "" (the default version) -> the checkpoint it means now.
        policy: The model's traffic policy (empty where none is set).
        loaded: The run's loaded checkpoints by id; live, so a load or a drop shows at once.
        fresh_until: Monotonic time at which the reads it rests on are due again.
    """

    name: str
    run_id: str
    run_name: str
    versions: tuple[str, ...]
    checkpoints: Mapping[str, str]
    policy: TrafficPolicy
    loaded: Mapping[str, LoadedModel]
    fresh_until: float


@dataclass
class LoadedModel:
    """A checkpoint loaded into its framework's Predictor."""

    ref: ModelRef
    framework: str
    predictor: Predictor
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    loaded_at: float = field(default_factory=time.time)
    # What compiling the model gave (tree models only, when compiling is on).
    compile_result: CompileResult | None = None
    # Nanoseconds a batched model call has taken per row (a moving average), once measured.
    ns_per_row: float | None = None
    # What the checkpoint's files take (its manifest): what the cache's byte budget counts.
    size_bytes: int = 0
    # Requests scoring on it now; the cache never drops a model while any are.
    in_flight: int = 0
    # When a request last took it (monotonic): the cache drops the least recently used first.
    used_at: float = field(default_factory=time.monotonic)
    # The model's token generation (a GenerationEngine), started by its first generate request.
    generation_engine: Any = None

    def release(self) -> None:
        """Called as the cache drops the model: stops its generation thread, if it has one."""
        if self.generation_engine is not None:
            self.generation_engine.close()

    @contextlib.contextmanager
    def serving(self) -> Iterator[LoadedModel]:
        """Marks the model in use for one request (on the event loop: no lock needed)."""
        self.in_flight += 1
        try:
            yield self
        finally:
            self.in_flight -= 1

    @property
    def columns(self) -> list[str] | None:
        return self.predictor.feature_columns

    @functools.cached_property
    def input_specs(self) -> dict[str, TensorSpec]:
        """The inputs by name (looked up on every request)."""
        return {s.name: s for s in self.inputs}

    @property
    def platform(self) -> str:
        """What ModelMetadata reports: the framework's declared platform (else its name: an MLflow pyfunc model)."""
        declared = frameworks.frameworks().get(self.framework)
        return declared.platform if declared is not None else self.framework
