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

import array
import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainwire_core.errors import ResourceExhaustedError
from trainwire_predictor.generative.grammar import Constraint, grammar_tokenizer
from trainwire_predictor.generative.lazy import LazyModule

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server

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
        logprobs: Each new token's log-probability with this many most likely alternatives
            (0: the token's alone; None: no log-probabilities).
        prompt_logprobs: The same for every prompt token (the first has none): one forward
            pass scores the prompt (None: not scored).
        presence_penalty: Subtracted from a token's logit once it has been generated (OpenAI's).
        frequency_penalty: Subtracted from a token's logit per time it has been generated (OpenAI's).
        logit_bias: (token id, bias) pairs added to the logits before every pick.
        grammar: A structured output's ``generative.grammar.Grammar``: only the tokens it allows
            are picked, and the generation stops when it completes (None: free text).
    """

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    deadline: float | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    grammar: Any = None

    @property
    def adjusts_logits(self) -> bool:
        """Whether the logits change before the pick (penalties or biases)."""
        return bool(self.presence_penalty or self.frequency_penalty or self.logit_bias)


@dataclass(frozen=True)
class TokenLogprob:
    """A token's log-probability under the model and the most likely tokens at its position.

    The model's own (raw) log-probabilities, ``log_softmax`` of its logits, as vLLM returns by
    default: before temperature, top_p, penalties and biases, so they score the text whatever
    sampled it.
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    """One generated token (or the end of the generation: ``finish_reason`` set, maybe with no token)."""

    index: int
    token_id: int | None
    text: str
    finish_reason: str | None = None
    # The picked token's log-probability when asked (also on an end-of-text STOP, which has no token_id).
    logprob: TokenLogprob | None = None
    # The prompt's tokens' (None for the first), on the first event when the prompt was scored.
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None


class Generation:
    """One request's stream of tokens; iterate it on the loop that submitted it.

    Leaving the iteration early (a cancelled stream, a closed connection) cancels
    the generation: its slot frees at the engine's next step.
    """

    def __init__(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        loop: asyncio.AbstractEventLoop,
        tenant: str = "",
        weight: float = 1.0,
        adapter: str = "",
    ) -> None:
        self.prompt_ids = prompt_ids
        self.adapter = adapter  # the LoRA adapter its rows get (a key of the engine's AdapterSet; "": the base)
        self.params = params
        self.loop = loop
        self.tenant = tenant  # whose share of the slots it takes (the token's name; "" anonymous)
        self.weight = weight
        self.number = 0  # its place in the order of submission (the engine's)
        self.queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self.cancelled = threading.Event()
        self.submitted_at = time.monotonic()
        # Called once, on the engine's thread, when the engine is done with it (the adapter it took is released).
        self.on_end: Any = None

    def cancel(self) -> None:
        self.cancelled.set()

    def ended(self) -> None:
        """The engine is done with the generation: runs ``on_end`` once."""
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end()

    def emit(self, event: TokenEvent) -> None:
        """Hands ``event`` to the request's loop (from the engine's thread)."""
        if event.finish_reason is not None:
            self.ended()
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
    # Penalties and biases (only when the request asks for them): counts of each generated token, biases.
    counts: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    # A structured output's place in its grammar (made at the first pick).
    constraint: Constraint | None = None


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


class _Tenant:
    """One tenant's waiting generations and its place in the fair order."""

    __slots__ = ("name", "weight", "waiting", "finish")

    def __init__(self, name: str, weight: float) -> None:
        self.name = name
        self.weight = weight
        self.waiting: collections.deque[Generation] = collections.deque()
        self.finish = 0.0  # virtual time at which its last admitted generation's share ends


class FairQueue:
    """Waiting generations by tenant, admitted in weighted fair order.

    A free slot goes to the waiting tenant holding the fewest slots for its weight (running
    divided by weight), so a tenant with weight 2 holds twice the slots of one with weight 1
    while both wait, and a burst from one tenant never holds back another's first request
    longer than one slot frees. Ties go by start-time fair queueing's virtual tags (each
    admission moves the tenant's tag 1/weight past the system's virtual time), then by
    submission; a tenant idle for long gains no credit, as its tag restarts at the present.
    """

    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        self._virtual = 0.0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Generation]:
        for tenant in self._tenants.values():
            yield from tenant.waiting

    def waiting(self, tenant: str) -> int:
        """Generations of ``tenant`` waiting now."""
        found = self._tenants.get(tenant)
        return len(found.waiting) if found is not None else 0

    def by_tenant(self) -> dict[str, int]:
        """Waiting generations per tenant (tenants with none included once seen)."""
        return {name: len(t.waiting) for name, t in self._tenants.items()}

    def append(self, generation: Generation) -> None:
        tenant = self._tenants.get(generation.tenant)
        if tenant is None:
            tenant = self._tenants[generation.tenant] = _Tenant(generation.tenant, generation.weight)
        tenant.weight = generation.weight  # the token table's weight now (a reload may change it)
        tenant.waiting.append(generation)
        self._count += 1

    def pop(self, running: Mapping[str, int]) -> Generation:
        """The next generation to admit, given the slots each tenant holds (``running``)."""
        best = min(
            (t for t in self._tenants.values() if t.waiting),
            key=lambda t: (running.get(t.name, 0) / t.weight, max(self._virtual, t.finish), t.waiting[0].number),
        )
        generation = best.waiting.popleft()
        self._count -= 1
        start = max(self._virtual, best.finish)
        best.finish = start + 1.0 / best.weight
        self._virtual = start
        return generation


class PrefixCache:
    """Key/value blocks of prompt prefixes seen before, least recently used out past a byte budget.

    A prompt is cut into blocks of ``block`` tokens; block i's key is a hash of block i's tokens
    and block i-1's key, so a key names the whole prefix up to its block's end. A prompt's
    leading blocks found here are its cached prefix: only the tokens after them are prefilled.
    The hash is BLAKE2b: a caller cannot craft a prompt whose key collides with another's.

    Args:
        budget_bytes: The most bytes of keys and values kept (every layer's of every block).
        block: Tokens per block.
    """

    def __init__(self, budget_bytes: int, block: int = 16) -> None:
        self.budget_bytes = budget_bytes
        self.block = block
        self.bytes = 0
        self._blocks: collections.OrderedDict[bytes, list[tuple[torch.Tensor, torch.Tensor]]] = (
            collections.OrderedDict()
        )
        # Counts for metrics and tests: prompt tokens looked up, and those found here.
        self.lookup_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def keys(self, ids: list[int], tenant: str = "") -> list[bytes]:
        """The key of each whole block of ``ids``, within ``tenant``'s own blocks.

        The chain starts from the tenant's name, so one tenant never reuses, and so can never
        time, another's prefixes (as vLLM's ``cache_salt``); a tenant's own requests share.
        """
        keys, parent = [], hashlib.blake2b(tenant.encode(), digest_size=16).digest() if tenant else b""
        for start in range(0, len(ids) - self.block + 1, self.block):
            data = array.array("q", ids[start : start + self.block]).tobytes()
            parent = hashlib.blake2b(parent + data, digest_size=16).digest()
            keys.append(parent)
        return keys

    def lookup(self, ids: list[int], keys: list[bytes]) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """How many leading tokens of ``ids`` are cached, and their keys and values per layer.

        At least the last token is left out: its logits start the generation.
        """
        self.lookup_tokens += len(ids)
        found = []
        for key in keys[: (len(ids) - 1) // self.block]:
            blocks = self._blocks.get(key)
            if blocks is None:
                break
            found.append((key, blocks))
        if not found:
            return 0, None
        # Most recently used last, the first block last of all: an evicted block's descendants go first.
        for key, _ in reversed(found):
            self._blocks.move_to_end(key)
        tokens = len(found) * self.block
        self.hit_tokens += tokens
        if len(found) == 1:
            return tokens, list(found[0][1])
        layers = zip(*(blocks for _, blocks in found), strict=True)
        return tokens, [(torch.cat([k for k, _ in kv], dim=2), torch.cat([v for _, v in kv], dim=2)) for kv in layers]

    def store(self, keys: list[bytes], caches: list[tuple[torch.Tensor, torch.Tensor]], start_block: int) -> None:
        """Keeps blocks ``start_block`` on of a prompt whose caches (one row, every position) are ``caches``."""
        for i in range(start_block, len(keys)):
            key = keys[i]
            if key in self._blocks:
                self._blocks.move_to_end(keys[i])
                continue
            cut = slice(i * self.block, (i + 1) * self.block)
            # Copies: a view would keep the whole prompt's tensors alive.
            blocks = [(k[:, :, cut].clone(), v[:, :, cut].clone()) for k, v in caches]
            size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in blocks)
            if size > self.budget_bytes:
                return
            self._blocks[key] = blocks
            self.bytes += size
            while self.bytes > self.budget_bytes:
                _, dropped = self._blocks.popitem(last=False)
                self.bytes -= sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in dropped)


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
        max_waiting_per_tenant: Most requests of one tenant waiting for a slot (0: only ``max_waiting``).
        prefix_cache_bytes: Bytes of prompt prefixes' keys and values kept for reuse (0: none kept).
        prefix_block: Tokens per block of the prefix cache.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch: int = 32,
        max_waiting: int = 1024,
        name: str = "",
        threads: int = 0,
        max_waiting_per_tenant: int = 0,
        prefix_cache_bytes: int = 0,
        prefix_block: int = 16,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_waiting = max_waiting
        self.max_waiting_per_tenant = max_waiting_per_tenant
        self.eos_ids = _eos_ids(model, tokenizer)
        self._grammar_cache: dict[str, Any] = {}
        self._waiting = FairQueue()
        self._submitted = 0
        # The tenants of the last admissions, oldest first (tests and the log read it).
        self.admitted: collections.deque[str] = collections.deque(maxlen=4096)
        self.tokens_by_tenant: collections.Counter[str] = collections.Counter()
        self.prefix_cache = PrefixCache(prefix_cache_bytes, prefix_block) if prefix_cache_bytes > 0 else None
        self._wake = threading.Condition()
        self._closed = False
        self._active: list[_Sequence] = []
        self._batch: _Batch | None = None
        # LoRA adapters on this model (a generative.adapters.AdapterSet), set by the first request for one.
        self.adapters: Any = None
        self.steps = 0  # decode steps so far (tests and metrics read it)
        self.threads = threads or max(1, (os.cpu_count() or 1) - 1)
        self._thread = threading.Thread(target=self._run, name=f"generate-{name}", daemon=True)
        self._thread.start()

    # --- the event loop's side ---------------------------------------------------
    def submit(
        self, prompt_ids: list[int], params: SamplingParams, tenant: str = "", weight: float = 1.0, adapter: str = ""
    ) -> Generation:
        """Queues one request; iterate the answer for its tokens.

        Args:
            prompt_ids: The prompt's tokens.
            params: How it generates.
            tenant: Whose share of the slots it takes (the caller's token name; "" for anonymous callers).
            weight: The tenant's weight in the fair share (above 0).
            adapter: The LoRA adapter its rows get (loaded in ``adapters`` already; "": the base model).
        """
        generation = Generation(prompt_ids, params, asyncio.get_running_loop(), tenant, weight, adapter)
        with self._wake:
            if self._closed:
                raise ResourceExhaustedError("the model is being unloaded", field="model_name")
            if len(self._waiting) >= self.max_waiting:
                raise ResourceExhaustedError(
                    f"{len(self._waiting)} generations are waiting for this model, the most it queues "
                    "(generate_max_waiting)"
                )
            queued = self._waiting.waiting(tenant)
            if self.max_waiting_per_tenant and queued >= self.max_waiting_per_tenant:
                raise ResourceExhaustedError(
                    f"{queued} generations of {tenant or 'anonymous callers'!r} are waiting for this model, the most "
                    f"one tenant queues (generate_max_waiting_per_tenant {self.max_waiting_per_tenant})"
                )
            self._submitted += 1
            generation.number = self._submitted
            self._waiting.append(generation)
            self._wake.notify()
        return generation

    @property
    def active(self) -> int:
        """Sequences in the batch now."""
        return len(self._active)

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called (the engine takes no more requests)."""
        return self._closed

    def tenants(self) -> dict[str, tuple[int, int, int]]:
        """Each tenant seen: (waiting, running, tokens generated so far), for the metrics."""
        running = collections.Counter(seq.generation.tenant for seq in list(self._active))
        with self._wake:
            waiting = self._waiting.by_tenant()
        tokens = dict(self.tokens_by_tenant)
        names = set(waiting) | set(running) | set(tokens)
        return {name: (waiting.get(name, 0), running.get(name, 0), tokens.get(name, 0)) for name in names}

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
                joining: list[Generation] = []
                if self._waiting and len(self._active) < self.max_batch:
                    running = collections.Counter(seq.generation.tenant for seq in self._active)
                    while self._waiting and len(self._active) + len(joining) < self.max_batch:
                        generation = self._waiting.pop(running)
                        running[generation.tenant] += 1
                        self.admitted.append(generation.tenant)
                        joining.append(generation)
            try:
                if self.adapters is not None:
                    self.adapters.install()  # hooks on layers a new adapter adapts: between passes only
                for generation in joining:
                    self._prefill(generation)
                if self._active:
                    self._decode()
            except Exception as exc:  # noqa: BLE001 - every request in the batch is told
                logger.exception("generation failed")
                told = {id(seq.generation) for seq in self._active}
                # The batch, and the joining generations that never got into it, are told.
                for generation in [seq.generation for seq in self._active] + [g for g in joining if id(g) not in told]:
                    generation.emit(TokenEvent(0, None, f"{type(exc).__name__}: {exc}", "error"))
                self._active, self._batch = [], None
        for seq in self._active:
            seq.generation.emit(TokenEvent(len(seq.tokens), None, "", CANCELLED))
        for generation in self._waiting:
            generation.emit(TokenEvent(0, None, "", CANCELLED))

    def _prefill(self, generation: Generation) -> None:
        if generation.cancelled.is_set():
            generation.ended()
            return
        params = generation.params
        generator = None
        if params.temperature > 0 and params.seed is not None:
            generator = torch.Generator().manual_seed(params.seed)
        seq = _Sequence(generation, generator)
        prompt = generation.prompt_ids
        scored = params.prompt_logprobs is not None
        cache, keys, reused, past = self.prefix_cache, [], 0, None
        if cache is not None:
            # An adapter changes the keys and values: its prefixes are its own, as each tenant's are.
            salt = f"{generation.tenant}\0{generation.adapter}" if generation.adapter else generation.tenant
            keys = cache.keys(prompt, salt)
            if not scored:  # a scored prompt needs every position's logits: prefilled whole
                reused, past = cache.lookup(prompt, keys)
        ids = torch.tensor([prompt[reused:]], dtype=torch.long)
        extra: dict[str, Any] = {}
        if past is not None:
            from transformers import DynamicCache

            extra["cache"] = DynamicCache(ddp_cache_data=past)
        with self._adapted([generation]):
            out = self.model(
                input_ids=ids,
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                position_ids=torch.arange(reused, len(prompt)).unsqueeze(0),
                use_cache=True,
                logits_to_keep=0 if scored else 1,  # 0: every position's, to score the prompt
                **extra,
            )
        caches = [(layer.keys, layer.values) for layer in out.cache.layers]
        if cache is not None:
            cache.store(keys, caches, reused // cache.block)
        if scored:
            seq.prompt_logprobs = _prompt_logprobs(out.logits[0], generation.prompt_ids, params.prompt_logprobs or 0)
        if params.max_tokens == 0:  # prompt scoring only: nothing to generate
            generation.emit(TokenEvent(0, None, "", LENGTH, prompt_logprobs=seq.prompt_logprobs))
            return
        if params.adjusts_logits:
            vocab = out.logits.shape[-1]
            seq.counts = torch.zeros(vocab)
            seq.bias = torch.zeros(vocab)
            for token_id, bias in params.logit_bias:
                seq.bias[token_id] = bias
        joined = _Batch(caches, torch.ones(1, len(prompt), dtype=torch.long), torch.tensor([len(prompt)]))
        logits = out.logits[:, -1]
        token, logprob = self._pick(self._adjusted(logits, [seq])[0], seq, logits[0])
        if self._advance(seq, token, logprob):
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
        with self._adapted([seq.generation for seq in self._active]):
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
        raw = out.logits[:, -1]
        adjusted = self._adjusted(raw, self._active)
        for row, seq in enumerate(self._active):
            token, logprob = self._pick(adjusted[row], seq, raw[row])
            if not self._advance(seq, token, logprob):
                done.append(row)
        if done:
            rows = [row for row in range(len(self._active)) if row not in done]
            self._active = [self._active[row] for row in rows]
            self._batch = batch.keep(rows) if rows else None

    def _adapted(self, generations: list[Generation]) -> contextlib.AbstractContextManager[None]:
        """Each row's LoRA adapter applied during one forward pass (nothing when no row has one)."""
        if self.adapters is None or not any(g.adapter for g in generations):
            return contextlib.nullcontext()
        return self.adapters.rows([g.adapter for g in generations])

    @staticmethod
    def _adjusted(logits: torch.Tensor, seqs: list[_Sequence]) -> torch.Tensor:
        """``logits`` (one row per sequence) with each row's penalties and biases applied.

        OpenAI's formula: ``logit - count * frequency_penalty - (count > 0) * presence_penalty + bias``,
        over the tokens generated so far; computed for the rows that ask, all at once.
        """
        rows = [row for row, seq in enumerate(seqs) if seq.counts is not None]
        if not rows:
            return logits
        params = [seqs[row].generation.params for row in rows]
        counts = torch.stack([seqs[row].counts for row in rows])  # type: ignore[misc]
        bias = torch.stack([seqs[row].bias for row in rows])  # type: ignore[misc]
        frequency = torch.tensor([[p.frequency_penalty] for p in params])
        presence = torch.tensor([[p.presence_penalty] for p in params])
        logits = logits.float().clone()
        index = torch.tensor(rows, dtype=torch.long)
        logits[index] += bias - counts * frequency - (counts > 0).float() * presence
        return logits

    def grammar_tokenizer(self) -> Any:
        """The model's vocabulary as the grammar library reads it (built once; call it off the event loop)."""
        vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
        return grammar_tokenizer(self.tokenizer, vocab, self.eos_ids, self._grammar_cache)

    def _pick(self, logits: torch.Tensor, seq: _Sequence, raw: torch.Tensor) -> tuple[int, TokenLogprob | None]:
        """The next token from ``logits`` (adjusted), and its log-probability under ``raw`` when asked.

        A row with a grammar picks among the tokens it allows (the others' logits are -inf);
        rows without one pay nothing.
        """
        params = seq.generation.params
        if params.grammar is not None:
            if seq.constraint is None:
                matcher = params.grammar.matcher(self.grammar_tokenizer())
                seq.constraint = Constraint(matcher, logits.shape[-1])
            allowed = seq.constraint.allowed()
            if not bool(allowed.any()) and self.eos_ids:  # the grammar is spent or broken: end here
                return min(self.eos_ids), None
            logits = logits.float().masked_fill(~allowed, float("-inf"))
        if params.temperature <= 0:
            token = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits.float() / params.temperature, dim=-1)
            if params.top_p < 1.0:
                sorted_probs, order = torch.sort(probs, descending=True)
                outside = sorted_probs.cumsum(0) - sorted_probs > params.top_p
                sorted_probs[outside] = 0.0
                probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
            token = int(torch.multinomial(probs, 1, generator=seq.generator))
        if seq.counts is not None:
            seq.counts[token] += 1
        if seq.constraint is not None and token not in self.eos_ids:
            seq.constraint.take(token)
        if params.logprobs is None:
            return token, None
        return token, _logprob(torch.log_softmax(raw.float(), dim=-1), token, params.logprobs)

    def _advance(self, seq: _Sequence, token: int, logprob: TokenLogprob | None = None) -> bool:
        """Sends ``token`` to the request; whether the sequence goes on."""
        generation = seq.generation
        if generation.cancelled.is_set():
            generation.ended()
            return False
        index = len(seq.tokens)
        prompt, seq.prompt_logprobs = seq.prompt_logprobs, None  # sent once, with the first event
        if token in self.eos_ids:
            generation.emit(TokenEvent(index, None, "", STOP, logprob, prompt))
            return False
        seq.tokens.append(token)
        self.tokens_by_tenant[generation.tenant] += 1
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
            generation.emit(TokenEvent(index, token, new, STOP, logprob, prompt))
            return False
        finish = LENGTH if len(seq.tokens) >= generation.params.max_tokens else None
        if seq.constraint is not None and seq.constraint.complete:
            finish = STOP  # the structured output is whole: only the end of text could follow
        generation.emit(TokenEvent(index, token, new, finish, logprob, prompt))
        return finish is None


def _logprob(logprobs: torch.Tensor, token: int, top: int) -> TokenLogprob:
    """``token``'s entry of one position's log-probabilities, with the ``top`` most likely."""
    alternatives: tuple[tuple[int, float], ...] = ()
    if top > 0:
        values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))
        alternatives = tuple(zip(ids.tolist(), values.tolist(), strict=True))
    return TokenLogprob(token, float(logprobs[token]), alternatives)


def _prompt_logprobs(logits: torch.Tensor, ids: list[int], top: int) -> tuple[TokenLogprob | None, ...]:
    """Each prompt token's log-probability given the tokens before it (the first has none)."""
    logprobs = torch.log_softmax(logits[:-1].float(), dim=-1)  # position i predicts token i + 1
    return (None, *(_logprob(logprobs[i], ids[i + 1], top) for i in range(len(ids) - 1)))


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
