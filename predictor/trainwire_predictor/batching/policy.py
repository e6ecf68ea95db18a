"""Batching policies: Triton's ``dynamic_batching`` per model, each framework's default, the setting's parser."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.models import LoadedModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DynamicBatching:
    """How requests for a model that is not batch invariant are batched (Triton's ``dynamic_batching``).

    Attributes:
        max_batch_size: Most rows in one model call.
        max_queue_delay_us: Longest a request waits for others before its call starts.
        preferred_batch_sizes: Row counts at which a call starts at once, without waiting out the delay.
        instances: Calls of the model at once (Triton's instance group count): the next batch forms
            while one is scored, and the calls share the cores.
        adaptive: Start a call once the queue holds as many rows as the model has held at once
            lately (its recent peak, less the rows in calls), without waiting out the delay: the
            delay then bounds the wait only when fewer requests come than came before, and it
            counts from when the model was last free to take a call.
    """

    max_batch_size: int = 64
    max_queue_delay_us: int = 500
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1
    adaptive: bool = False

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise InvalidArgumentError("max_batch_size must be at least 1", field="max_batch_size")
        if self.max_queue_delay_us < 0:
            raise InvalidArgumentError("max_queue_delay_us may not be negative", field="max_queue_delay_us")
        if self.instances < 1:
            raise InvalidArgumentError("instances must be at least 1", field="instances")
        if not isinstance(self.adaptive, bool):
            raise InvalidArgumentError("adaptive must be true or false", field="adaptive")
        if any(not 1 <= size <= self.max_batch_size for size in self.preferred_batch_sizes):
            raise InvalidArgumentError(
                f"preferred_batch_sizes must lie within 1..max_batch_size ({self.max_batch_size})",
                field="preferred_batch_sizes",
            )


# Each framework's default; tree models (batch invariant) batch while busy whatever this says, and
# a framework not named here is called once per request unless a model's own policy says otherwise.
# Adaptive, one call at a time: a call's rows cost far less each than one-row calls side by side
# (a dense layer's weights are read once per call), so concurrent callers wait for one another,
# but only for as many as came at once lately, and at most 2 ms.
# Not Transformers: its pipeline scores a list one text at a time, so a joined call costs as much
# as its requests one by one, run one after another instead of side by side on the threads.
_DENSE = DynamicBatching(max_batch_size=64, max_queue_delay_us=2000, instances=1, adaptive=True)
FRAMEWORK_BATCHING: dict[str, DynamicBatching] = {"torch": _DENSE, "horovod": _DENSE, "tensorflow": _DENSE}


def configured_batching(model: LoadedModel) -> tuple[bool, DynamicBatching | None]:
    """A model's own policy, where its configuration says one (a model repository's ``config.pbtxt``).

    Returns:
        (whether the model has its own configuration, its policy: None where it joins no requests).
    """
    own = getattr(model.predictor, "scheduling", None)
    if own is None:
        return False, None
    if not own.dynamic_batching:
        return True, None
    policy = DynamicBatching(own.max_batch_size, own.max_queue_delay_us, own.preferred_batch_sizes, own.instances or 1)
    return True, policy


def batching_by_framework(model: LoadedModel) -> DynamicBatching | None:
    """The model's own policy (``configured_batching``), else its framework's default (None: one call per request)."""
    configured, policy = configured_batching(model)
    return policy if configured else FRAMEWORK_BATCHING.get(model.framework)


def parse_batching(text: str) -> Callable[[LoadedModel], DynamicBatching | None]:
    """The policy lookup of the ``dynamic_batching`` setting.

    Args:
        text: A JSON object naming models (run names or ids) or frameworks, each mapped to
            ``{"max_batch_size": ..., "max_queue_delay_us": ..., "preferred_batch_sizes": [...]}``
            or to null (one call per request): ``{"torch": null, "my-bert": {"max_batch_size": 8}}``.
            A model's entry wins over its framework's, which wins over ``FRAMEWORK_BATCHING``; a
            model's own configuration (``configured_batching``) wins over them all.

    Raises:
        InvalidArgumentError: Not such an object (field ``dynamic_batching``).
    """
    import json

    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"dynamic_batching: not JSON ({exc})", field="dynamic_batching") from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError("dynamic_batching must be a JSON object", field="dynamic_batching")
    table: dict[str, DynamicBatching | None] = {}
    for name, entry in raw.items():
        if entry is None:
            table[name] = None
            continue
        if not isinstance(entry, dict):
            raise InvalidArgumentError(
                f"dynamic_batching[{name!r}] must be an object or null", field="dynamic_batching"
            )
        try:
            sizes = tuple(int(n) for n in entry.pop("preferred_batch_sizes", ()))
            table[name] = DynamicBatching(**entry, preferred_batch_sizes=sizes)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"dynamic_batching[{name!r}]: {exc}", field="dynamic_batching") from None

    def lookup(model: LoadedModel) -> DynamicBatching | None:
        configured, policy = configured_batching(model)
        if configured:  # the model's own configuration wins, as in Triton
            return policy
        for name in (model.ref.run_name, model.ref.run_id, model.framework):
            if name and name in table:
                return table[name]
        return FRAMEWORK_BATCHING.get(model.framework)

    return lookup


def prepare_batched(lookup: Callable[[LoadedModel], DynamicBatching | None]) -> Callable[[LoadedModel], None]:
    """What the model repository runs on each model it loads (in its loading thread).

    A model that ``lookup`` batches is readied for multi-row calls (``Predictor.prepare_for_batches``);
    a failure there is logged, and the model serves as it loaded.
    """

    def prepare(model: LoadedModel) -> None:
        if lookup(model) is None:
            return
        try:
            model.predictor.prepare_for_batches()
        except Exception:  # noqa: BLE001 - the model serves as loaded
            logger.warning("cannot prepare model %s for batched calls", model.ref.run_id, exc_info=True)

    return prepare
