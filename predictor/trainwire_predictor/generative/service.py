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

from trainwire_core.errors import FailedPreconditionError, InvalidArgumentError
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
        _, _, model = self.router.target_now(routed) or await self.router.target(routed)
        engine = self.engine(model, request.model_name)
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
        generation = engine.submit(ids, request.params, request.tenant, request.weight)
        name = model.ref.run_name or model.ref.run_id
        served = self._served(model, generation, started)
        return GenerationStream(
            name,
            model.ref.checkpoint_id,
            len(ids),
            served,
            prompt_ids=tuple(ids),
            generation=generation,
            tokenizer=engine.tokenizer,
        )

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
