"""Generation on the data plane: resolve the model as inference does, then stream its tokens.

``TextGenerator.open`` does everything that can fail before the first token
(routing, loading, the checks that need the model), so a front end can still
answer a plain error status; the stream it returns then only yields tokens.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from trainwire_core.manifest import verify_checkpoint
from trainwire_predictor.generative.adapters import (
    AdapterRef,
    AdapterSet,
    adapter_base,
    adapter_files,
    load_adapter,
)
from trainwire_predictor.generative.engine import Generation, GenerationEngine, TokenEvent
from trainwire_predictor.generative.requests import GenerateLimits, GenerateRequest, render_chat
from trainwire_predictor.inference import InferenceRequest
from trainwire_predictor.models import LoadedModel, ModelRef
from trainwire_predictor.routing import Router
from trainwire_predictor.statistics import Recorder, Timing, now_ns

logger = logging.getLogger(__name__)
_ENGINES_LOCK = threading.Lock()


def language_model(model: LoadedModel) -> tuple[Any, Any] | None:
    """The (model, tokenizer) of a loaded causal language model; None for any other model."""
    pipeline = getattr(model.predictor, "pipeline", None)
    lm = getattr(pipeline, "model", None)
    tokenizer = getattr(pipeline, "tokenizer", None)
    if lm is None or tokenizer is None:
        return None
    if not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in lm.config.architectures or ()):
        return None
    return lm, tokenizer


def max_context(lm: Any) -> int:
    """The most positions the model takes (prompt and new tokens together)."""
    config = lm.config
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1 << 30


def _prompt_ids(tokenizer: Any, request: GenerateRequest) -> list[int]:
    """The prompt's token ids: the chat rendered with the tokenizer's template, then tokenized."""
    if request.prompt_ids:
        return list(request.prompt_ids)
    text = render_chat(tokenizer, request.messages, request.tools) if request.messages else request.prompt
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass
class GenerationStream:
    """An opened generation: its resolved model and prompt, and its tokens to iterate."""

    model_name: str
    model_version: str
    prompt_tokens: int
    events: AsyncIterator[TokenEvent]
    completion_tokens: int = 0
    finish_reason: str = ""
    prompt_ids: tuple[int, ...] = ()
    generation: Generation | None = None
    tokenizer: Any = None

    def cancel(self) -> None:
        """Ends a generation that will not be iterated (its slot frees at the engine's next step)."""
        if self.generation is not None:
            self.generation.cancel()

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self._follow()

    async def _follow(self) -> AsyncIterator[TokenEvent]:
        async for event in self.events:
            if event.token_id is not None:
                self.completion_tokens += 1
            if event.finish_reason is not None:
                self.finish_reason = event.finish_reason
            yield event

    def usage(self) -> dict[str, int]:
        """The prompt's tokens and those generated so far, as OpenAI's ``usage`` counts them."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    async def text(self) -> str:
        """The whole generated text (waits for the end)."""
        return "".join([event.text async for event in self])


class TextGenerator:
    """Token generation for every front end.

    Args:
        router: Resolves and loads each request's model and follows its traffic policy, as for inference.
        recorder: Told of each generation as one request of its model.
        limits: What the operator allows one generation.
    """

    def __init__(self, router: Router, recorder: Recorder, limits: GenerateLimits) -> None:
        self.router = router
        self.recorder = recorder
        self.limits = limits
        self._engines: dict[Any, tuple[ModelRef, GenerationEngine]] = {}
        # Checkpoint (run id, id) -> (its adapter folder, the base it names) or None for a plain model;
        # checkpoints are immutable, so what was read stays true.
        self._adapters: dict[tuple[str, str], tuple[str, tuple[str, str] | None] | None] = {}
        self._verified: set[tuple[str, str]] = set()

    def engines(self) -> list[tuple[ModelRef, GenerationEngine]]:
        """The running engines with their models (the metrics read their tenants)."""
        with _ENGINES_LOCK:
            for key, (_, engine) in list(self._engines.items()):
                if engine.closed:
                    del self._engines[key]
            return list(self._engines.values())

    def engine(self, model: LoadedModel, name: str) -> GenerationEngine:
        """The loaded model's engine (started on first use; stopped when the cache drops the model).

        Raises:
            FailedPreconditionError: The model is not a causal language model.
        """
        engine = model.generation_engine
        if engine is not None:
            return engine
        found = language_model(model)
        if found is None:
            raise FailedPreconditionError(
                f"model {name!r} ({model.framework}) does not generate text: generation serves causal language models",
                field="model_name",
            )
        with _ENGINES_LOCK:
            if model.generation_engine is None:
                lm, tokenizer = found
                model.generation_engine = GenerationEngine(
                    lm,
                    tokenizer,
                    self.limits.max_batch,
                    self.limits.max_waiting,
                    name=model.ref.run_id,
                    threads=self.limits.threads,
                    max_waiting_per_tenant=self.limits.max_waiting_per_tenant,
                    prefix_cache_bytes=self.limits.prefix_cache_bytes,
                    pack_weights=self.limits.pack_weights,
                )
                self._engines[model.ref.key] = (model.ref, model.generation_engine)
        return model.generation_engine

    async def open(self, request: GenerateRequest) -> GenerationStream:
        """Resolves, loads and checks; the returned stream yields the tokens.

        The prompt's size is checked before any work on it, and the chat template and the
        tokenizer run off the event loop: a huge prompt never holds up other requests.

        Raises:
            TrainwireError: Unknown model, a model that does not generate, a prompt too long
                for the model or the operator's limits (naming the field), or a full queue.
        """
        started = now_ns()
        routed = InferenceRequest(request.model_name, request.model_version, routing_key=request.routing_key)
        adapter = None
        target = self.router.target_now(routed)
        if target is not None and self._adapters.get(target[2].ref.key, ...) is None:
            model = target[2]  # a loaded model known to be plain: the request passes the router once
        else:
            adapter = await self.adapter(request.model_name, request.model_version)
            if adapter is not None:  # served on its base model, loaded as for the base's own requests
                routed = InferenceRequest(adapter.base_name, adapter.base_version, routing_key=request.routing_key)
            _, _, model = self.router.target_now(routed) or await self.router.target(routed)
        engine = self.engine(model, routed.model_name)
        room = max_context(engine.model)
        most_chars = self.limits.prompt_chars(room)
        if request.prompt_chars() > most_chars:
            raise InvalidArgumentError(
                f"{request.field} has {request.prompt_chars()} characters, over the limit of {most_chars}",
                field=request.field,
            )
        ids = await asyncio.to_thread(_prompt_ids, engine.tokenizer, request)
        if not ids:
            raise InvalidArgumentError("the prompt has no tokens", field=request.field)
        most_tokens = self.limits.prompt_tokens(room)
        if len(ids) > most_tokens:
            raise InvalidArgumentError(
                f"{request.field} has {len(ids)} tokens, over the limit of {most_tokens}", field=request.field
            )
        vocab = int(getattr(engine.model.config, "vocab_size", 0) or 0)
        if vocab and request.prompt_ids and not all(0 <= i < vocab for i in ids):
            raise InvalidArgumentError(f"{request.field} holds token ids outside 0..{vocab - 1}", field=request.field)
        if vocab and any(not 0 <= token < vocab for token, _ in request.params.logit_bias):
            raise InvalidArgumentError(f"logit_bias names token ids outside 0..{vocab - 1}", field="logit_bias")
        if len(ids) + request.params.max_tokens > room:
            raise InvalidArgumentError(
                f"the prompt's {len(ids)} tokens and max_tokens {request.params.max_tokens} exceed the model's "
                f"context of {room}",
                field="max_tokens",
            )
        if request.params.grammar is not None:  # the grammar's view of the vocabulary: built once, off the loop
            await asyncio.to_thread(engine.grammar_tokenizer)
        label = ""
        if adapter is not None:
            label = adapter.label
            await self._take(engine, adapter)
        try:
            generation = engine.submit(ids, request.params, request.tenant, request.weight, label)
        except BaseException:
            if adapter is not None:
                engine.adapters.release(label)
            raise
        if adapter is not None:
            generation.on_end = lambda: engine.adapters.release(label)
        name = model.ref.run_name or model.ref.run_id
        served = self._served(model, generation, started)
        return GenerationStream(
            adapter.name if adapter is not None else name,
            adapter.key[1] if adapter is not None else model.ref.checkpoint_id,
            len(ids),
            served,
            prompt_ids=tuple(ids),
            generation=generation,
            tokenizer=engine.tokenizer,
        )

    # --- LoRA adapters ------------------------------------------------------------------------------
    async def adapter(self, name: str, version: str = "") -> AdapterRef | None:
        """The LoRA adapter a model name means, or None for a plain model.

        ``name[:version]`` of a run whose checkpoint holds adapters alone, served on the base
        its checkpoint names; or ``base:adapter``, where ``adapter`` (a run name or id) is no
        version or alias of ``base``. A plain model's answer is cached: its requests read a dict.

        Raises:
            NotFoundError: Neither reading names a model.
            FailedPreconditionError: An adapter that names no base, asked for without one.
        """
        models = self.router.models
        resolution = models.resolution_now(name)
        if resolution is not None:
            checkpoint = resolution.checkpoints.get(version)
            if checkpoint is not None and self._adapters.get((resolution.run_id, checkpoint), ...) is None:
                return None  # a plain model, known: the common case reads no more
        try:
            ref = await models.resolve(name, version)
        except NotFoundError as exc:
            if not version or exc.field != "model_version":
                raise
            try:  # base:adapter
                ref = await models.resolve(version)
            except NotFoundError:
                raise exc from None
            found = await self._adapter_of(ref)
            if found is None:
                raise exc from None
            return AdapterRef(ref.key, version, name, "", found[0])
        found = await self._adapter_of(ref)
        if found is None:
            return None
        folder, base = found
        if base is None:
            raise FailedPreconditionError(
                f"model {name!r} holds LoRA adapters that name no base model: ask for it as <base model>:{name}",
                field="model_name",
            )
        return AdapterRef(ref.key, name, base[0], base[1], folder)

    async def adapter_parent(self, name: str) -> str | None:
        """The base model an adapter run is served on (None: not an adapter, or one that names no base)."""
        try:
            ref = await self.router.models.resolve(name)
        except NotFoundError:
            return None
        found = await self._adapter_of(ref)
        return found[1][0] if found is not None and found[1] is not None else None

    async def _adapter_of(self, ref: ModelRef) -> tuple[str, tuple[str, str] | None] | None:
        if ref.key not in self._adapters:
            self._adapters[ref.key] = await asyncio.to_thread(self._inspect, ref)
        return self._adapters[ref.key]

    def _inspect(self, ref: ModelRef) -> tuple[str, tuple[str, str] | None] | None:
        """Whether a checkpoint holds adapters alone: their folder and the base they name (blocking)."""
        store = self.router.models.store
        folder = adapter_files(store, store.checkpoint_dir(ref.run_id, ref.checkpoint_id))
        if folder is None:
            return None
        return folder, adapter_base(store, folder)

    async def _take(self, engine: GenerationEngine, ref: AdapterRef) -> None:
        """Takes the adapter on the engine's base model for one generation, loading it when it is not."""
        with _ENGINES_LOCK:
            if engine.adapters is None:
                engine.adapters = AdapterSet(engine.model, self.limits.lora_bytes)
        adapters: AdapterSet = engine.adapters
        if adapters.take(ref.label):
            return
        adapter = await asyncio.to_thread(self._load_adapter, ref)
        await asyncio.to_thread(adapters.add, adapter)  # taken once it is in

    def _load_adapter(self, ref: AdapterRef) -> Any:
        store = self.router.models.store
        if ref.key not in self._verified:  # its files against its manifest, once, as every checkpoint's
            verify_checkpoint(store, store.checkpoint_dir(*ref.key), label=ref.label)
            self._verified.add(ref.key)
        return load_adapter(store, ref.directory, ref.label)

    async def _served(
        self, model: LoadedModel, generation: AsyncIterator[TokenEvent], started: int
    ) -> AsyncIterator[TokenEvent]:
        model.in_flight += 1  # the cache keeps the model while it generates
        failed = True
        try:
            async for event in generation:
                if event.finish_reason == "error":
                    raise FailedPreconditionError(f"generation failed: {event.text}", field="model_name")
                yield event
            failed = False
        finally:
            model.in_flight -= 1
            if failed:
                self.recorder.failure(model.ref, now_ns() - started)
            else:
                self.recorder.success(model.ref, Timing(started), now_ns() - started)
