"""Continuous batching of token generation over one causal language model.

One thread per model runs the decode loop: every step feeds the last token of
every active sequence through the model at once, with their key/value caches
stacked into one batch. Sequences of different lengths share the batch padded
on the left (masked, with their own position ids), as ``transformers``'
batched ``generate`` pads them. A new request is prefilled on its own and joins
the batch between two decode steps; a finished, cancelled or late one leaves
it at the next step, freeing its slot.

Tokens reach the request's ``asyncio.Queue`` through its loop's
``call_soon_threadsafe``: the event loop never waits on the model.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import torch

from trainwire_core.errors import ResourceExhaustedError

logger = logging.getLogger(__name__)

# Why a generation ended (OpenAI's finish_reason names, and two of trainwire's).
LENGTH, STOP, DEADLINE, CANCELLED = "length", "stop", "deadline", "cancelled"


@dataclass(frozen=True)
class SamplingParams:
    """How one request generates.

    Args:
        max_tokens: Most new tokens.
        temperature: 0 is greedy (what ``generate(do_sample=False)`` gives); above 0 samples.
        top_p: Nucleus sampling's probability mass (1: all tokens).
        seed: Seeds a sampling request's own generator (None: unseeded).
        stop: Texts that end the generation when the output reaches one (not included).
        deadline: ``time.monotonic()`` by which the generation ends, or None.
    """

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    deadline: float | None = None


@dataclass(frozen=True)
class TokenEvent:
    """One generated token (or the end of the generation: ``finish_reason`` set, maybe with no token)."""

    index: int
    token_id: int | None
    text: str
    finish_reason: str | None = None


class Generation:
    """One request's stream of tokens; iterate it on the loop that submitted it.

    Leaving the iteration early (a cancelled stream, a closed connection) cancels
    the generation: its slot frees at the engine's next step.
    """

    def __init__(self, prompt_ids: list[int], params: SamplingParams, loop: asyncio.AbstractEventLoop) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.loop = loop
        self.queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self.cancelled = threading.Event()
        self.submitted_at = time.monotonic()

    def cancel(self) -> None:
        self.cancelled.set()

    def emit(self, event: TokenEvent) -> None:
        """Hands ``event`` to the request's loop (from the engine's thread)."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is listening
            self.cancelled.set()

    async def __aiter__(self) -> AsyncIterator[TokenEvent]:
        try:
            while True:
                event = await self.queue.get()
                yield event
                if event.finish_reason is not None:
                    return
        finally:
            self.cancel()


@dataclass
class _Sequence:
    """A generation in the batch: its tokens so far and the text already sent."""

    generation: Generation
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    sent_text: str = ""


class _Batch:
    """The active sequences' stacked caches: row i's tokens fill the last of the T columns."""

    def __init__(self, caches: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, positions: torch.Tensor):
        self.caches = caches  # per layer (keys, values), each (B, heads, T, head_dim)
        self.mask = mask  # (B, T): 1 where a real token is cached
        self.positions = positions  # (B,): each row's next position id

    @staticmethod
    def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
        missing = width - t.shape[dim]
        if missing == 0:
            return t
        shape = list(t.shape)
        shape[dim] = missing
        return torch.cat([t.new_zeros(shape), t], dim=dim)

    def join(self, other: _Batch) -> _Batch:
        width = max(self.mask.shape[1], other.mask.shape[1])
        caches = [
            (
                torch.cat([self._pad_left(k, width, 2), self._pad_left(k2, width, 2)]),
                torch.cat([self._pad_left(v, width, 2), self._pad_left(v2, width, 2)]),
            )
            for (k, v), (k2, v2) in zip(self.caches, other.caches, strict=True)
        ]
        mask = torch.cat([self._pad_left(self.mask, width, 1), self._pad_left(other.mask, width, 1)])
        return _Batch(caches, mask, torch.cat([self.positions, other.positions]))

    def keep(self, rows: list[int]) -> _Batch:
        """Only ``rows``, and no leading column that every kept row pads."""
        index = torch.tensor(rows, dtype=torch.long)
        mask = self.mask.index_select(0, index)
        start = int((mask.sum(0) > 0).nonzero()[0]) if mask.numel() else 0
        caches = [
            (k.index_select(0, index)[:, :, start:], v.index_select(0, index)[:, :, start:]) for k, v in self.caches
        ]
        return _Batch(caches, mask[:, start:], self.positions.index_select(0, index))


class GenerationEngine:
    """Generates for many requests at once on one causal LM, in a thread of its own.

    Args:
        model: A ``transformers`` causal LM (``...ForCausalLM``), in eval mode.
        tokenizer: Its tokenizer (decodes the streamed text).
        max_batch: Most sequences decoded together; more requests wait their turn.
        max_waiting: Most requests waiting for a slot; more are refused (RESOURCE_EXHAUSTED).
        name: The model's name, for the thread and the log.
        threads: Torch's threads for the decode (0: all cores but one, left to the event loop
            that streams the tokens).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch: int = 32,
        max_waiting: int = 1024,
        name: str = "",
        threads: int = 0,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_waiting = max_waiting
        self.eos_ids = _eos_ids(model, tokenizer)
        self._waiting: collections.deque[Generation] = collections.deque()
        self._wake = threading.Condition()
        self._closed = False
        self._active: list[_Sequence] = []
        self._batch: _Batch | None = None
        self.steps = 0  # decode steps so far (tests and metrics read it)
        self.threads = threads or max(1, (os.cpu_count() or 1) - 1)
        self._thread = threading.Thread(target=self._run, name=f"generate-{name}", daemon=True)
        self._thread.start()

    # --- the event loop's side ---------------------------------------------------
    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        """Queues one request; iterate the answer for its tokens."""
        generation = Generation(prompt_ids, params, asyncio.get_running_loop())
        with self._wake:
            if self._closed:
                raise ResourceExhaustedError("the model is being unloaded", field="model_name")
            if len(self._waiting) >= self.max_waiting:
                raise ResourceExhaustedError(
                    f"{len(self._waiting)} generations are waiting for this model, the most it queues"
                )
            self._waiting.append(generation)
            self._wake.notify()
        return generation

    @property
    def active(self) -> int:
        """Sequences in the batch now."""
        return len(self._active)

    def close(self, wait_s: float = 0.0) -> None:
        """Ends every generation (cancelled) and stops the thread after its current step.

        Args:
            wait_s: How long to wait for the thread to end (0: do not wait, e.g. on an event loop).
        """
        with self._wake:
            self._closed = True
            self._wake.notify()
        if wait_s > 0:
            self._thread.join(timeout=wait_s)

    # --- the engine's thread -----------------------------------------------------
    def _run(self) -> None:
        # Torch's thread count is the calling thread's own: this sets the decode's alone.
        torch.set_num_threads(self.threads)
        with torch.inference_mode():
            self._loop()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._waiting and not self._active:
                    self._wake.wait()
                if self._closed:
                    break
                joining = []
                while self._waiting and len(self._active) + len(joining) < self.max_batch:
                    joining.append(self._waiting.popleft())
            try:
                for generation in joining:
                    self._prefill(generation)
                if self._active:
                    self._decode()
            except Exception as exc:  # noqa: BLE001 - every request in the batch is told
                logger.exception("generation failed")
                for seq in self._active:
                    seq.generation.emit(TokenEvent(len(seq.tokens), None, f"{type(exc).__name__}: {exc}", "error"))
                self._active, self._batch = [], None
        for seq in self._active:
            seq.generation.emit(TokenEvent(len(seq.tokens), None, "", CANCELLED))
        for generation in self._waiting:
            generation.emit(TokenEvent(0, None, "", CANCELLED))

    def _prefill(self, generation: Generation) -> None:
        if generation.cancelled.is_set():
            return
        params = generation.params
        generator = None
        if params.temperature > 0 and params.seed is not None:
            generator = torch.Generator().manual_seed(params.seed)
        seq = _Sequence(generation, generator)
        ids = torch.tensor([generation.prompt_ids], dtype=torch.long)
        out = self.model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            position_ids=torch.arange(ids.shape[1]).unsqueeze(0),
            use_cache=True,
            logits_to_keep=1,
        )
        caches = [(layer.keys, layer.values) for layer in out.cache.layers]
        joined = _Batch(caches, torch.ones_like(ids), torch.tensor([ids.shape[1]]))
        token = self._pick(out.logits[0, -1], seq)
        if self._advance(seq, token):
            self._batch = joined if self._batch is None else self._batch.join(joined)
            self._active.append(seq)

    def _decode(self) -> None:
        batch = self._batch
        assert batch is not None
        now = time.monotonic()
        keep = []
        for row, seq in enumerate(self._active):
            reason = _ended(seq.generation, now)
            if reason is None:
                keep.append(row)
            else:
                seq.generation.emit(TokenEvent(len(seq.tokens), None, "", reason))
        if len(keep) < len(self._active):
            self._active = [self._active[row] for row in keep]
            if not keep:
                self._batch = None
                return
            batch = self._batch = batch.keep(keep)
        from transformers import DynamicCache

        last = torch.tensor([[seq.tokens[-1]] for seq in self._active], dtype=torch.long)
        mask = torch.cat([batch.mask, torch.ones_like(last)], dim=1)
        out = self.model(
            input_ids=last,
            attention_mask=mask,
            position_ids=batch.positions.unsqueeze(1),
            cache=DynamicCache(ddp_cache_data=batch.caches),
            use_cache=True,
        )
        self.steps += 1
        batch.caches = [(layer.keys, layer.values) for layer in out.cache.layers]
        batch.mask, batch.positions = mask, batch.positions + 1
        done = []
        for row, seq in enumerate(self._active):
            if not self._advance(seq, self._pick(out.logits[row, -1], seq)):
                done.append(row)
        if done:
            rows = [row for row in range(len(self._active)) if row not in done]
            self._active = [self._active[row] for row in rows]
            self._batch = batch.keep(rows) if rows else None

    def _pick(self, logits: torch.Tensor, seq: _Sequence) -> int:
        params = seq.generation.params
        if params.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            outside = sorted_probs.cumsum(0) - sorted_probs > params.top_p
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=seq.generator))

    def _advance(self, seq: _Sequence, token: int) -> bool:
        """Sends ``token`` to the request; whether the sequence goes on."""
        generation = seq.generation
        if generation.cancelled.is_set():
            return False
        index = len(seq.tokens)
        if token in self.eos_ids:
            generation.emit(TokenEvent(index, None, "", STOP))
            return False
        seq.tokens.append(token)
        text = self.tokenizer.decode(seq.tokens, skip_special_tokens=True)
        if text.endswith("\ufffd") and len(seq.tokens) < generation.params.max_tokens:
            text = text[:-1]  # part of a character: sent with the token that completes it
        new, stopped = text[len(seq.sent_text) :], False
        for stop in generation.params.stop:
            at = text.find(stop, max(0, len(seq.sent_text) - len(stop) + 1))
            if at >= 0:
                new, stopped = text[len(seq.sent_text) : at], True
        seq.sent_text += new
        if stopped:
            generation.emit(TokenEvent(index, token, new, STOP))
            return False
        finish = LENGTH if len(seq.tokens) >= generation.params.max_tokens else None
        generation.emit(TokenEvent(index, token, new, finish))
        return finish is None


def _ended(generation: Generation, now: float) -> str | None:
    if generation.cancelled.is_set():
        return CANCELLED
    deadline = generation.params.deadline
    if deadline is not None and now >= deadline:
        return DEADLINE
    return None


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids = model.generation_config.eos_token_id if getattr(model, "generation_config", None) else None
    if ids is None:
        ids = tokenizer.eos_token_id
    if ids is None:
        return frozenset()
    return frozenset(ids if isinstance(ids, list) else [ids])
