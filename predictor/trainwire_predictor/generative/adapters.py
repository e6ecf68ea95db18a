"""Many LoRA adapters on one base model: each row of a batch gets its own adapter's delta.

A run that trains LoRA adapters with ``peft`` and saves them alone
(``HuggingFaceCheckpoint.from_model(..., merge_adapters=False, base_model=...)``) is served on
its base model, already loaded for its own requests, rather than as a copy of the base. A
request names the adapter run (its name, id or ``name:version``), or ``base:adapter``.

The base model's adapted layers (``nn.Linear`` or GPT-2's ``Conv1D``) get a forward hook that
adds, row by row, ``x @ A[row]^T @ B[row]^T * scale[row]``: the A and B matrices of every loaded
adapter are stacked per layer (zeros for slot 0, the base itself, and for adapters that leave a
layer alone; lower ranks padded with zeros, which add exactly nothing), and each step gathers
the rows' own. Rows for different adapters and for the base share one decode step.

Adapters load on the first request that names them and are dropped, least recently used first,
past a byte budget; an adapter with generations running is never dropped.
"""

from __future__ import annotations

import collections
import json
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainwire.huggingface.checkpoint import ADAPTER_BASE_FILE
from trainwire_core.errors import FailedPreconditionError, ResourceExhaustedError
from trainwire_predictor.generative.lazy import LazyModule

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_BASE = ADAPTER_BASE_FILE  # the served model the adapter was trained on (HuggingFaceCheckpoint writes it)
_PREFIX = "base_model.model."


@dataclass(frozen=True)
class AdapterRef:
    """An adapter checkpoint and the base model it is served on.

    Attributes:
        key: The adapter's (run id, checkpoint id): its identity in the base's adapter set.
        name: The model name the request gave (what answers carry).
        base_name: The base model's name (a run name or id).
        base_version: The base model's version ("" follows its traffic policy).
        directory: The adapter files' folder in the store.
    """

    key: tuple[str, str]
    name: str
    base_name: str
    base_version: str
    directory: str

    @property
    def label(self) -> str:
        return "/".join(self.key)


@dataclass
class Adapter:
    """One adapter's matrices per adapted layer (A: rank x in, B: out x rank) and its scale."""

    key: str
    layers: dict[str, tuple[torch.Tensor, torch.Tensor]]
    scale: float
    nbytes: int
    running: int = 0  # generations using it now: never dropped while any are


def read_adapter(config: dict[str, Any], tensors: dict[str, torch.Tensor], key: str) -> Adapter:
    """An adapter from its ``adapter_config.json`` and ``adapter_model.safetensors`` (peft's files).

    Raises:
        FailedPreconditionError: A kind of adapter that is not a plain LoRA (DoRA, per-layer ranks,
            fully trained modules), or files that do not agree.
    """
    if config.get("peft_type", "LORA") != "LORA":
        raise FailedPreconditionError(f"adapter {key}: only LoRA adapters are served, not {config.get('peft_type')}")
    unsupported = [k for k in ("use_dora", "rank_pattern", "alpha_pattern", "modules_to_save") if config.get(k)]
    if config.get("lora_bias"):
        unsupported.append("lora_bias")
    if unsupported:
        raise FailedPreconditionError(f"adapter {key}: {', '.join(unsupported)} is not served (only plain LoRA)")
    rank = int(config.get("r") or 8)
    alpha = float(config.get("lora_alpha") or rank)
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    halves: dict[str, dict[str, torch.Tensor]] = collections.defaultdict(dict)
    for name, tensor in tensors.items():
        for half in ("lora_A", "lora_B"):
            marker = f".{half}."
            if marker in name:
                layer = name.split(marker)[0].removeprefix(_PREFIX)
                halves[layer][half] = tensor.detach().float().contiguous()
    layers = {}
    for layer, pair in halves.items():
        if set(pair) != {"lora_A", "lora_B"} or pair["lora_A"].shape[0] != pair["lora_B"].shape[1]:
            raise FailedPreconditionError(f"adapter {key}: layer {layer} has no matching lora_A and lora_B")
        layers[layer] = (pair["lora_A"], pair["lora_B"])
    if not layers:
        raise FailedPreconditionError(f"adapter {key}: its weights hold no LoRA matrices")
    nbytes = sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in layers.values())
    return Adapter(key, layers, scale, nbytes)


@dataclass(frozen=True)
class _Stack:
    """Every loaded adapter's matrices stacked per layer; slot 0 is the base (zeros)."""

    slots: dict[str, int]
    a: dict[str, torch.Tensor]  # layer -> (slots, rank, in)
    b: dict[str, torch.Tensor]  # layer -> (slots, out, rank)
    scale: torch.Tensor  # (slots,)


class AdapterSet:
    """The adapters loaded on one base model, and the hooks that apply them row by row.

    The engine's thread sets the rows' adapters around each forward pass (``rows``); other
    threads add adapters (``add``) and take and release them (``take``, ``release``).

    Args:
        model: The base model (its layers get the hooks).
        budget_bytes: The most bytes of adapter matrices kept; least recently used out.
    """

    def __init__(self, model: Any, budget_bytes: int) -> None:
        self.model = model
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._adapters: collections.OrderedDict[str, Adapter] = collections.OrderedDict()
        self._stack = _Stack({}, {}, {}, torch.zeros(1))
        self._hooked: set[str] = set()
        self._handles: list[Any] = []
        # What the forward pass running now applies: its stack and each row's slot (None: no adapter rows).
        self._current: tuple[_Stack, torch.Tensor] | None = None
        self.loads = 0  # counts, for metrics and tests
        self.drops = 0

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._adapters

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(a.nbytes for a in self._adapters.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._adapters)

    def add(self, adapter: Adapter) -> None:
        """Loads ``adapter`` (taken once: ``release`` it), dropping unused ones past the budget.

        Raises:
            FailedPreconditionError: Its matrices do not fit the base model's layers.
            ResourceExhaustedError: It does not fit in the budget beside the adapters in use.
        """
        self._check_shapes(adapter)
        with self._lock:
            if adapter.key in self._adapters:
                self._adapters[adapter.key].running += 1
                self._adapters.move_to_end(adapter.key)
                return
            used = sum(a.nbytes for a in self._adapters.values())
            for key in [k for k, a in self._adapters.items() if a.running == 0]:
                if used + adapter.nbytes <= self.budget_bytes:
                    break
                used -= self._adapters.pop(key).nbytes
                self.drops += 1
            if used + adapter.nbytes > self.budget_bytes:
                raise ResourceExhaustedError(
                    f"adapter {adapter.key} ({adapter.nbytes} bytes) does not fit beside the adapters in use "
                    f"(generate_lora_bytes {self.budget_bytes})",
                    field="model_name",
                )
            adapter.running = 1
            self._adapters[adapter.key] = adapter
            self.loads += 1
            self._stack = self._restack()

    def take(self, key: str) -> bool:
        """Marks a loaded adapter in use by one more generation; False when it is not loaded."""
        with self._lock:
            adapter = self._adapters.get(key)
            if adapter is None:
                return False
            adapter.running += 1
            self._adapters.move_to_end(key)
            return True

    def release(self, key: str) -> None:
        """One generation that took ``key`` has ended."""
        with self._lock:
            adapter = self._adapters.get(key)
            if adapter is not None and adapter.running > 0:
                adapter.running -= 1

    def _check_shapes(self, adapter: Adapter) -> None:
        for layer, (a, b) in adapter.layers.items():
            try:
                module = self.model.get_submodule(layer)
            except AttributeError:
                raise FailedPreconditionError(
                    f"adapter {adapter.key} adapts layer {layer}, which the base model does not have",
                    field="model_name",
                ) from None
            weight = getattr(module, "weight", None)
            # nn.Linear keeps (out, in); GPT-2's Conv1D (in, out).
            shape = tuple(weight.shape) if weight is not None else ()
            if type(module).__name__ == "Conv1D":
                shape = shape[::-1]
            if shape != (b.shape[0], a.shape[1]):
                raise FailedPreconditionError(
                    f"adapter {adapter.key}: layer {layer} is {tuple(shape)} in the base model, the adapter's "
                    f"{(b.shape[0], a.shape[1])}: it was trained on another base",
                    field="model_name",
                )

    def _restack(self) -> _Stack:
        """The stacks for the adapters loaded now (under the lock; a new object: a running pass keeps its own)."""
        adapters = list(self._adapters.values())
        slots = {a.key: i + 1 for i, a in enumerate(adapters)}
        layers = sorted({layer for a in adapters for layer in a.layers})
        stack_a, stack_b = {}, {}
        for layer in layers:
            users = [(slots[a.key], a.layers[layer]) for a in adapters if layer in a.layers]
            rank = max(pair[0].shape[0] for _, pair in users)
            width_in, width_out = users[0][1][0].shape[1], users[0][1][1].shape[0]
            a_rows = torch.zeros(len(adapters) + 1, rank, width_in)
            b_rows = torch.zeros(len(adapters) + 1, width_out, rank)
            for slot, (a, b) in users:
                a_rows[slot, : a.shape[0]] = a
                b_rows[slot, :, : b.shape[1]] = b
            stack_a[layer], stack_b[layer] = a_rows, b_rows
        scale = torch.tensor([0.0, *(a.scale for a in adapters)])
        return _Stack(slots, stack_a, stack_b, scale)

    # --- the engine's thread ------------------------------------------------------------------
    def install(self) -> None:
        """Hooks every layer a loaded adapter adapts (on the engine's thread, between passes)."""
        stack = self._stack
        for layer in stack.a:
            if layer not in self._hooked:
                module = self.model.get_submodule(layer)
                self._handles.append(module.register_forward_hook(self._hook(layer)))
                self._hooked.add(layer)

    @contextmanager
    def rows(self, keys: list[str]) -> Iterator[None]:
        """Applies each row's adapter (``keys[row]``, "" for the base) during one forward pass."""
        stack = self._stack
        slots = [stack.slots.get(key, 0) if key else 0 for key in keys]
        # A generation cancelled as its adapter was dropped reads slot 0: its tokens are thrown away.
        self._current = (stack, torch.tensor(slots, dtype=torch.long)) if any(slots) else None
        try:
            yield
        finally:
            self._current = None

    def _hook(self, layer: str) -> Callable[[Any, Any, torch.Tensor], torch.Tensor | None]:
        def hook(module: Any, inputs: Any, output: torch.Tensor) -> torch.Tensor | None:
            current = self._current
            if current is None:
                return None
            stack, slots = current
            a = stack.a.get(layer)
            if a is None:
                return None
            x = inputs[0]
            rows_a = a.index_select(0, slots).to(x.dtype)  # (B, rank, in)
            rows_b = stack.b[layer].index_select(0, slots).to(x.dtype)  # (B, out, rank)
            scale = stack.scale.index_select(0, slots).to(x.dtype).view(-1, 1, 1)
            delta = torch.bmm(torch.bmm(x, rows_a.transpose(1, 2)), rows_b.transpose(1, 2)) * scale
            return output + delta

        return hook

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._hooked.clear()


def adapter_files(store: Any, directory: str) -> str | None:
    """The folder of a checkpoint that holds LoRA adapters alone (peft's files), or None (blocking)."""
    for folder in (f"{directory}/checkpoint", directory):
        if store.exists(f"{folder}/{ADAPTER_CONFIG}"):
            return folder
    return None


def load_adapter(store: Any, folder: str, key: str) -> Adapter:
    """Reads an adapter's files from the store (blocking)."""
    from safetensors.torch import load as load_safetensors

    config = json.loads(store.read_bytes(f"{folder}/{ADAPTER_CONFIG}"))
    weights = f"{folder}/{ADAPTER_WEIGHTS}"
    if not store.exists(weights):
        raise FailedPreconditionError(f"adapter {key} has no {ADAPTER_WEIGHTS}", field="model_name")
    return read_adapter(config, load_safetensors(store.read_bytes(weights)), key)


def adapter_base(store: Any, folder: str) -> tuple[str, str] | None:
    """The served model an adapter was trained on, as its checkpoint records it (name, version), or None."""
    path = f"{folder}/{ADAPTER_BASE}"
    if not store.exists(path):
        return None
    doc = json.loads(store.read_bytes(path))
    base = doc.get("base_model")
    if not isinstance(base, str) or not base:
        return None
    name, _, version = base.partition(":")
    return name, str(doc.get("base_version") or version)
