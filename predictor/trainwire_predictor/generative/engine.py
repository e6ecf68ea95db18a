"""Continuous batching of token generation over one causal language model.

One thread per model runs the decode loop: every step feeds the last token of
every active sequence through the model at once, with their key/value caches
stacked into one batch. Sequences of different lengths share the batch padded
on the left (masked, with their own position ids), as ``transformers``'
batched ``generate`` pads them. The requests admitted between two decode steps
are prefilled together (``GenerationEngine._prefill``) and join the batch, whose
keys and values stay in place (``generative.kvcache``); a finished, cancelled or
late one leaves it at the next step, freeing its slot. The linear layers'
weights are packed for oneDNN when the thread starts (``generative.packed``).

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
from trainwire_predictor.generative.kvcache import BatchCache, past_cache
from trainwire_predictor.generative.lazy import LazyModule
from trainwire_predictor.generative.packed import pack_linear_layers

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server

logger = logging.getLogger(__name__)

# Most prompt tokens prefilled in one pass (a longer prompt is one pass of its own). A burst's
# prompts are cut into passes of about this many tokens: the matrix products are as efficient at
# this size as at any larger, and each pass's requests get their first token when it ends.
PREFILL_TOKENS = 128

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
        # The last prefix of several blocks looked up, joined: (its last block's key, keys and values per layer).
        self._joined: tuple[bytes, list[tuple[torch.Tensor, torch.Tensor]]] | None = None
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

    def peek(self, keys: list[bytes]) -> int:
        """How many of ``keys`` lead with blocks kept here (not counted, not marked used)."""
        found = 0
        for key in keys:
            if key not in self._blocks:
                break
            found += 1
        return found

    def lookup(
        self, ids: list[int], keys: list[bytes], tensors: bool = True
    ) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """How many leading tokens of ``ids`` are cached, and their keys and values per layer.

        At least the last token is left out: its logits start the generation. With ``tensors``
        False, the count alone (for a prompt whose past another prompt's lookup brought).
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
        if not tensors:
            return tokens, None
        if len(found) == 1:
            return tokens, list(found[0][1])
        # The last prefix joined is kept joined: a stream of requests sharing it joins it once.
        # (Its blocks are never changed, so the joined copy stays right while they are kept.)
        last = found[-1][0]
        if self._joined is not None and self._joined[0] == last:
            return tokens, self._joined[1]
        layers = zip(*(blocks for _, blocks in found), strict=True)
        joined = [(torch.cat([k for k, _ in kv], dim=2), torch.cat([v for _, v in kv], dim=2)) for kv in layers]
        self._joined = (last, joined)
        return tokens, joined

    def store(
        self, keys: list[bytes], caches: list[tuple[torch.Tensor, torch.Tensor]], start_block: int, offset: int = 0
    ) -> None:
        """Keeps blocks ``start_block`` on of a prompt whose caches (one row) are ``caches``.

        ``caches`` hold the prompt's positions from ``offset`` on (at most ``start_block`` blocks in).
        """
        for i in range(start_block, len(keys)):
            key = keys[i]
            if key in self._blocks:
                self._blocks.move_to_end(keys[i])
                continue
            cut = slice(i * self.block - offset, (i + 1) * self.block - offset)
            # Copies: a view would keep the whole prompt's tensors alive.
            blocks = [(k[:, :, cut].clone(), v[:, :, cut].clone()) for k, v in caches]
            size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in blocks)
            if size > self.budget_bytes:
                return
            self._blocks[key] = blocks
            self.bytes += size
            while self.bytes > self.budget_bytes:
                gone, dropped = self._blocks.popitem(last=False)
                if self._joined is not None and self._joined[0] == gone:
                    self._joined = None
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
        pack_weights: Whether the linear layers' weights are packed for oneDNN's matrix products
            (``generative.packed``: faster decode steps, twice those weights' memory).
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
        pack_weights: bool = True,
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
        self._batch: BatchCache | None = None
        # LoRA adapters on this model (a generative.adapters.AdapterSet), set by the first request for one.
        self.adapters: Any = None
        self.steps = 0  # decode steps so far (tests and metrics read it)
        self.threads = threads or max(1, (os.cpu_count() or 1) - 1)
        self.pack_weights = pack_weights
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
            if self.pack_weights:
                try:
                    packed = pack_linear_layers(self.model, batch_hint=max(8, min(self.max_batch, 32)))
                    logger.debug("%s: %d linear layers packed for oneDNN", self._thread.name, packed)
                except Exception:  # noqa: BLE001 - the plain layers still serve
                    logger.exception("packing the linear layers failed; they serve unpacked")
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
                if joining:
                    self._prefill(joining)
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

    def _prefill(self, joining: list[Generation]) -> None:
        """Prefills the joining generations, batched, and adds those that go on to the decode batch.

        Prompts that reuse the same cached prefix (or none) are prefilled together, padded on
        the left, in passes of at most ``PREFILL_TOKENS`` tokens. A prompt whose leading blocks
        another joining prompt is about to prefill and cache waits for that pass and then reuses
        them, rather than computing them again: a burst sharing a new system prompt prefills it once.
        """
        cache = self.prefix_cache
        plans: list[tuple[Generation, list[bytes]]] = []
        for generation in joining:
            if generation.cancelled.is_set():
                generation.ended()
                continue
            keys: list[bytes] = []
            if cache is not None:
                # An adapter changes the keys and values: its prefixes are its own, as each tenant's are.
                salt = f"{generation.tenant}\0{generation.adapter}" if generation.adapter else generation.tenant
                keys = cache.keys(generation.prompt_ids, salt)
            plans.append((generation, keys))
        later: list[tuple[Generation, list[bytes]]] = []
        if cache is not None and len(plans) > 1:
            # Blocks a first prompt will compute and cache in this round; a later prompt whose next
            # uncached block is among them waits for the second round.
            coming: set[bytes] = set()
            first = []
            for generation, keys in plans:
                usable = keys[: (len(generation.prompt_ids) - 1) // cache.block]
                found = cache.peek(usable)
                if found < len(usable) and usable[found] in coming:
                    later.append((generation, keys))
                    continue
                coming.update(usable[found:])
                first.append((generation, keys))
            plans = first
        for round_plans in (plans, later):
            # Together: prompts whose past is the same cached prefix (or none); a scored one alone.
            groups: dict[Any, list[tuple[Generation, list[bytes], int, Any]]] = {}
            for generation, keys in round_plans:
                if generation.params.prompt_logprobs is not None:  # needs every position's logits: whole
                    groups[("scored", generation.number)] = [(generation, keys, 0, None)]
                    continue
                reused, past, group = 0, None, (0, b"")
                if cache is not None:
                    usable = keys[: (len(generation.prompt_ids) - 1) // cache.block]
                    found = cache.peek(usable)
                    group = (found, usable[found - 1] if found else b"")
                    # The past's tensors are read once per group, before any pass can store (and evict).
                    reused, past = cache.lookup(generation.prompt_ids, keys, tensors=group not in groups)
                    if group in groups:
                        past = groups[group][0][3]
                groups.setdefault(group, []).append((generation, keys, reused, past))
            for members in groups.values():
                # At most PREFILL_TOKENS tokens a pass (a longer prompt alone): the first requests of a
                # burst get their first token after their own pass, not after the whole burst's.
                chunk: list[tuple[Generation, list[bytes], int, Any]] = []
                tokens = 0
                for member in members:
                    size = len(member[0].prompt_ids) - member[2]
                    if chunk and tokens + size > PREFILL_TOKENS:
                        self._prefill_group(chunk)
                        chunk, tokens = [], 0
                    chunk.append(member)
                    tokens += size
                if chunk:
                    self._prefill_group(chunk)

    def _prefill_group(self, members: list[tuple[Generation, list[bytes], int, Any]]) -> None:
        """One pass over prompts that share their cached past (``reused`` tokens, the same for all)."""
        cache = self.prefix_cache
        reused, past = members[0][2], members[0][3]
        generations = [m[0] for m in members]
        tails = [g.prompt_ids[reused:] for g in generations]
        width = max(map(len, tails))
        count = len(generations)
        ids = torch.zeros(count, width, dtype=torch.long)
        mask = torch.zeros(count, reused + width, dtype=torch.long)
        positions = torch.full((count, width), reused, dtype=torch.long)
        mask[:, :reused] = 1
        for row, tail in enumerate(tails):
            pad = width - len(tail)
            ids[row, pad:] = torch.tensor(tail, dtype=torch.long)
            mask[row, reused + pad :] = 1
            positions[row, pad:] = torch.arange(reused, reused + len(tail))
        extra: dict[str, Any] = {}
        if past is not None:
            extra["cache"] = past_cache([(k.expand(count, -1, -1, -1), v.expand(count, -1, -1, -1)) for k, v in past])
        scored = count == 1 and generations[0].params.prompt_logprobs is not None
        with self._adapted(generations):
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=0 if scored else 1,  # 0: every position's, to score the prompt
                **extra,
            )
        caches = [(layer.keys, layer.values) for layer in out.cache.layers]
        if cache is not None:
            for row, (_, keys, _, _) in enumerate(members):
                # The row's own columns, from its first prompt token after the cached past.
                start = reused + width - len(tails[row])
                own = [(k[row : row + 1, :, start:], v[row : row + 1, :, start:]) for k, v in caches]
                cache.store(keys, own, reused // cache.block, offset=reused)
        logits = out.logits[:, -1]
        joining = []
        for row, generation in enumerate(generations):
            params = generation.params
            generator = None
            if params.temperature > 0 and params.seed is not None:
                generator = torch.Generator().manual_seed(params.seed)
            seq = _Sequence(generation, generator)
            if scored:
                top = params.prompt_logprobs or 0
                seq.prompt_logprobs = _prompt_logprobs(out.logits[0], generation.prompt_ids, top)
            if params.max_tokens == 0:  # prompt scoring only: nothing to generate
                generation.emit(TokenEvent(0, None, "", LENGTH, prompt_logprobs=seq.prompt_logprobs))
                continue
            if params.adjusts_logits:
                vocab = logits.shape[-1]
                seq.counts = torch.zeros(vocab)
                seq.bias = torch.zeros(vocab)
                for token_id, bias in params.logit_bias:
                    seq.bias[token_id] = bias
            row_logits = logits[row : row + 1]
            token, logprob = self._pick(self._adjusted(row_logits, [seq])[0], seq, row_logits[0])
            if self._advance(seq, token, logprob):
                joining.append((row, seq))
        if not joining:
            return
        layers, rows_mask = caches, mask
        if len(joining) < count:  # some ended at their first token
            index = torch.tensor([row for row, _ in joining], dtype=torch.long)
            layers = [(k.index_select(0, index), v.index_select(0, index)) for k, v in caches]
            rows_mask = mask.index_select(0, index)
        next_positions = torch.tensor([len(seq.generation.prompt_ids) for _, seq in joining], dtype=torch.long)
        if self._batch is None:
            self._batch = BatchCache(layers, rows_mask, next_positions)
        else:
            self._batch.add(layers, rows_mask, next_positions)
        self._active.extend(seq for _, seq in joining)

    def _decode(self) -> None:
        batch = self._batch
        assert batch is not None
        now = time.monotonic()
        gone = []
        for row, seq in enumerate(self._active):
            reason = _ended(seq.generation, now)
            if reason is not None:
                gone.append(row)
                seq.generation.emit(TokenEvent(len(seq.tokens), None, "", reason))
        if gone:
            self._leave(gone)
            if not self._active:
                return
            batch = self._batch
            assert batch is not None
        last = torch.tensor([[seq.tokens[-1]] for seq in self._active], dtype=torch.long)
        mask, positions, step_cache = batch.step_inputs()
        with self._adapted([seq.generation for seq in self._active]):
            out = self.model(
                input_ids=last,
                attention_mask=mask,
                position_ids=positions,
                cache=step_cache,
                use_cache=True,
            )
        batch.stepped()
        self.steps += 1
        done = []
        raw = out.logits[:, -1]
        adjusted = self._adjusted(raw, self._active)
        for row, seq in enumerate(self._active):
            token, logprob = self._pick(adjusted[row], seq, raw[row])
            if not self._advance(seq, token, logprob):
                done.append(row)
        if done:
            self._leave(done)

    def _leave(self, rows: list[int]) -> None:
        """Takes ``rows`` out of the batch (their sequences have ended)."""
        batch = self._batch
        assert batch is not None
        if len(rows) == len(self._active):
            self._active, self._batch = [], None
            return
        order = batch.drop(rows)
        self._active = [self._active[row] for row in order]

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
