"""Traffic policies: weighted (A/B/N) and sticky routing across a model's versions, and shadow traffic.

A model's policy lives in the store beside its aliases (``runs/<run_id>/aliases.json``,
set through the coordinator's ModelRegistry) and is re-read as the index is, so
every replica follows a change within ``index_refresh_s``. Only a request that
names no version follows the weights; a named version or alias is served as asked.

- **Weights**: percents over versions or aliases (an alias is followed as it moves).
- **Sticky routing**: a request with a routing key lands on the point of [0, 100)
  its hash gives, so it reaches the same version as long as the weights stay the same.
- **Shadow**: after the served answer is ready, a copy of the request goes to the
  shadow version in a background task, scored on threads of its own; its answer is
  compared with the served one and dropped. It never delays, changes or fails the
  served answer: at most ``max_shadow_inflight`` copies run at once (more are
  dropped and counted), and every failure of a copy stays inside its task. A shadow
  that fails ``SHADOW_FAILURES`` copies in a row is paused (its copies skipped and
  counted), for ``SHADOW_PAUSE_S`` at first and twice as long after each failed try,
  up to ``SHADOW_PAUSE_MAX_S``; one copy that is answered ends the pause.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import hashlib
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from trainwire_core.store_documents import TrafficPolicy
from trainwire_predictor.batching import Batcher
from trainwire_predictor.inference import InferenceRequest, InferenceResponse
from trainwire_predictor.model_repository import ModelRepository
from trainwire_predictor.models import LoadedModel, Resolution

logger = logging.getLogger(__name__)

# What a request is served by: the request (its version as the policy picked it), the shadow target
# ("": none) and the loaded model. A plain tuple: one is made per request.
Target = tuple[InferenceRequest, str, LoadedModel]

# Points on the weight ranges: percents to two decimals, so a 0.01% share is still reachable.
_POINTS = 10_000
# Seconds: 1 ms to 30 s.
SHADOW_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OUTCOMES = ("agree", "disagree", "error", "dropped", "paused")
# A shadow that keeps failing (a model that cannot load, a bad input form) would cost a
# load or a thread per copy for nothing: after this many errors in a row it pauses.
SHADOW_FAILURES = 5
SHADOW_PAUSE_S = 1.0
SHADOW_PAUSE_MAX_S = 60.0


@dataclass
class _Pause:
    """One shadow target's errors in a row and its pause."""

    failures: int = 0
    pause_s: float = 0.0
    until: float = 0.0


@dataclass(frozen=True)
class Split:
    """One policy's weights, ready to pick from: the targets and the cumulative upper bound of each."""

    targets: tuple[str, ...]
    bounds: tuple[float, ...]
    shadow: str

    @classmethod
    def of(cls, route: TrafficPolicy) -> Split:
        targets, bounds, total = [], [], 0.0
        for weight in route.weights:
            total += float(weight.weight)
            targets.append(weight.version)
            bounds.append(total)
        return cls(tuple(targets), tuple(bounds), route.shadow)

    def pick(self, routing_key: str = "", rng: random.Random | None = None) -> str:
        """The target a request goes to ("" when there are no weights): by its key's hash, else at random."""
        if not self.targets:
            return ""
        total = self.bounds[-1]
        if routing_key:
            digest = hashlib.blake2b(routing_key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            point = (int.from_bytes(digest, "big") % _POINTS) * total / _POINTS
        else:
            point = (rng or random).random() * total
        # bisect_right: a point on a bound belongs to the next range, and a 0% target is never picked.
        return self.targets[min(bisect.bisect_right(self.bounds, point), len(self.targets) - 1)]


def outputs_agree(served: InferenceResponse, shadow: InferenceResponse, rtol: float, atol: float) -> bool:
    """Whether two answers carry the same outputs: equal, or within the tolerance for floats."""
    theirs = dict(shadow.outputs)
    for name, ours in served.outputs:
        other = theirs.get(name)
        if other is None or other.shape != ours.shape:
            return False
        if ours.dtype.kind in "fc" or other.dtype.kind in "fc":
            try:
                if not np.allclose(ours, other, rtol=rtol, atol=atol, equal_nan=True):
                    return False
            except TypeError:
                return False
        elif not np.array_equal(ours, other):
            return False
    return True


class ShadowMetrics:
    """Prometheus metrics of shadow traffic (served beside the ``nv_inference_*`` ones).

    - ``trainwire_shadow_requests_total{model, version, shadow_version, outcome}``: copies by
      outcome (agree, disagree, error, dropped);
    - ``trainwire_shadow_agreement_ratio{model, version, shadow_version}``: agree / (agree + disagree);
    - ``trainwire_shadow_duration_seconds{model, shadow_version}``: how long a copy took.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("model", "version", "shadow_version")
        by_outcome = (*labels, "outcome")
        self.requests = Counter(
            "trainwire_shadow_requests", "Shadow copies of requests, by outcome", by_outcome, registry=registry
        )
        self.agreement = Gauge(
            "trainwire_shadow_agreement_ratio", "Shadow answers equal to the served ones", labels, registry=registry
        )
        self.duration = Histogram(
            "trainwire_shadow_duration_seconds",
            "Time a shadow copy took to answer",
            ("model", "shadow_version"),
            registry=registry,
            buckets=SHADOW_BUCKETS_S,
        )


class Router:
    """Chooses the version of requests that name none, and sends their shadow copies.

    Args:
        models: Resolution, the registry reads and the loaded-model cache.
        max_shadow_inflight: Shadow copies running at once; more are dropped (counted).
        shadow_threads: Threads scoring shadow copies (apart from the served requests' threads).
        registry: Where the shadow metrics are registered (None: no Prometheus metrics).
        rtol: Relative tolerance when comparing float outputs.
        atol: Absolute tolerance when comparing float outputs.
        rng: The source of unkeyed picks (tests seed it).
    """

    def __init__(
        self,
        models: ModelRepository,
        *,
        max_shadow_inflight: int = 32,
        shadow_threads: int = 2,
        registry: CollectorRegistry | None = None,
        rtol: float = 1e-5,
        atol: float = 1e-6,
        rng: random.Random | None = None,
    ) -> None:
        self.models = models
        self.max_shadow_inflight = max(1, max_shadow_inflight)
        self.shadow_threads = max(1, shadow_threads)
        self.rtol, self.atol = rtol, atol
        self.rng = rng or random.Random()
        self.metrics = ShadowMetrics(registry) if registry is not None else None
        # Outcome counts per (model, version, shadow version), for the agreement rate and tests.
        self.counts: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        self._splits: dict[str, tuple[TrafficPolicy, Split]] = {}
        self._batcher: Batcher | None = None
        self._inflight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # (model name, shadow target as the policy names it) -> its failures and pause.
        self._pauses: dict[tuple[str, str], _Pause] = {}

    def target_now(self, request: InferenceRequest) -> Target | None:
        """The request to serve, its shadow target ("") and its loaded model, from fresh cached reads.

        Nothing is read or awaited (None: await ``target``): the model name is resolved once
        per refresh, and the resolution is all the pick and the model lookup need.
        """
        resolution = self.models.resolution_now(request.model_name)
        if resolution is None:
            return None
        routed, shadow = (request, "") if request.model_version else self.route(request, resolution)
        checkpoint = resolution.checkpoints.get(routed.model_version)
        model = resolution.loaded.get(checkpoint) if checkpoint is not None else None
        if model is None:
            return None
        model.used_at = time.monotonic()  # the cache's recency, for inference and generation alike
        return routed, shadow, model

    async def target(self, request: InferenceRequest) -> Target:
        """``target_now`` reading what is due and loading the model.

        Raises:
            TrainwireError: The model or version does not resolve, or the model cannot load.
        """
        # Resolved even for a named version, so the next request finds a Resolution to answer from.
        resolution = await self.models.resolution(request.model_name)
        routed, shadow = (
            (request, "") if request.model_version or resolution is None else self.route(request, resolution)
        )
        return routed, shadow, await self.models.get(routed.model_name, routed.model_version)

    def route(self, request: InferenceRequest, resolution: Resolution) -> tuple[InferenceRequest, str]:
        """The request with the version its policy picks (as the policy names it), and the shadow target ("")."""
        policy = resolution.policy
        if not policy:
            return request, ""
        cached = self._splits.get(resolution.run_id)
        if cached is None or cached[0] is not policy:
            # The registry's state is a new object on each read: one Split per read.
            cached = self._splits[resolution.run_id] = (policy, Split.of(policy))
        split = cached[1]
        target = split.pick(request.routing_key, self.rng)
        if target:
            request = dataclasses.replace(request, model_version=target)
        return request, split.shadow

    # --- shadow -------------------------------------------------------------
    @property
    def shadow_batcher(self) -> Batcher:
        if self._batcher is None:
            # Threads of its own: a slow shadow model cannot take the served requests' threads.
            self._batcher = Batcher(ThreadPoolExecutor(self.shadow_threads, thread_name_prefix="trainwire-shadow"))
        return self._batcher

    @property
    def shadow_inflight(self) -> int:
        return self._inflight

    def shadow(self, request: InferenceRequest, target: str, served: InferenceResponse) -> None:
        """Sends a copy of ``request`` to ``target`` in the background; never raises, never waits."""
        try:
            if self._inflight >= self.max_shadow_inflight:
                self._record(request.model_name, served.model_version, target, "dropped", None)
                return
            pause = self._pauses.get((request.model_name, target))
            if pause is not None and time.monotonic() < pause.until:
                self._record(request.model_name, served.model_version, target, "paused", None)
                return
            copy = dataclasses.replace(request, model_version=target)
            task = asyncio.get_running_loop().create_task(self._shadow(copy, served))
        except Exception:  # noqa: BLE001 - the served answer must go out whatever happens here
            logger.warning("cannot send a shadow copy to %s", target, exc_info=True)
            return
        self._inflight += 1
        self._tasks.add(task)
        task.add_done_callback(self._shadow_done)

    def _shadow_done(self, task: asyncio.Task[None]) -> None:
        self._inflight -= 1
        self._tasks.discard(task)

    async def _shadow(self, request: InferenceRequest, served: InferenceResponse) -> None:
        started = time.perf_counter()
        target = named = request.model_version
        try:
            model = await self.models.get(request.model_name, target)
            target = model.ref.checkpoint_id
            with model.serving():
                answer = await self.shadow_batcher.infer(request, model)
            outcome = "agree" if outputs_agree(served, answer, self.rtol, self.atol) else "disagree"
        except asyncio.CancelledError:
            return
        except Exception as exc:  # noqa: BLE001 - a failing shadow is counted, never reported to the caller
            logger.debug("shadow copy to %s failed: %s", target, exc)
            outcome = "error"
        self._record(request.model_name, served.model_version, target, outcome, time.perf_counter() - started)
        self._count_failure(request.model_name, named, outcome == "error")

    def _count_failure(self, model: str, target: str, failed: bool) -> None:
        """Ends a shadow's pause on an answer; pauses it after ``SHADOW_FAILURES`` errors in a row."""
        key = (model, target)
        if not failed:
            self._pauses.pop(key, None)
            return
        pause = self._pauses.get(key)
        if pause is None:
            if len(self._pauses) >= 1024:  # model names come from callers: start over rather than grow
                self._pauses.clear()
            pause = self._pauses[key] = _Pause()
        pause.failures += 1
        if pause.failures >= SHADOW_FAILURES and time.monotonic() >= pause.until:
            pause.pause_s = min(SHADOW_PAUSE_MAX_S, 2 * pause.pause_s or SHADOW_PAUSE_S)
            pause.until = time.monotonic() + pause.pause_s
            logger.warning(
                "shadow %s of model %s failed %d copies in a row; its copies pause for %g s",
                target,
                model,
                pause.failures,
                pause.pause_s,
            )

    def _record(self, model: str, version: str, shadow: str, outcome: str, seconds: float | None) -> None:
        key = (model, version, shadow)
        self.counts[(*key, outcome)] += 1
        if self.metrics is None:
            return
        self.metrics.requests.labels(*key, outcome).inc()
        if seconds is not None:
            self.metrics.duration.labels(model, shadow).observe(seconds)
        if outcome in ("agree", "disagree"):
            self.metrics.agreement.labels(*key).set(self.agreement(*key))

    def agreement(self, model: str, version: str, shadow: str) -> float:
        """Share of compared shadow answers equal to the served ones (NaN before the first)."""
        agree = self.counts[(model, version, shadow, "agree")]
        compared = agree + self.counts[(model, version, shadow, "disagree")]
        return agree / compared if compared else float("nan")

    async def drain(self) -> None:
        """Waits for the shadow copies in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._batcher is not None:
            self._batcher.executor.shutdown(wait=False, cancel_futures=True)  # type: ignore[attr-defined]
