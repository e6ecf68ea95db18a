"""Linear layers' weights packed once for oneDNN: the decode's matrix products at small batch sizes.

A decode step multiplies a few rows (one per sequence) by every weight matrix of the model.
``torch``'s default CPU path (MKL's ``sgemm``) repacks the weight matrix on every call, which at
8 or 32 rows costs more than the arithmetic: on the 2-core AMD machine of the benches a 124M
GPT-2's step for 8 rows spent 55 ms in its matrix products, against about 20 ms once each
weight is reordered once into oneDNN's blocked layout (``torch.ops.mkldnn._reorder_linear_weight``,
what ``torch.compile``'s CPU weight prepacking uses) and multiplied with
``torch.ops.mkldnn._linear_pointwise``. The results agree with ``F.linear``'s to float32 rounding
(the sums are taken in another order).

Each packed layer keeps its own weight too (adapters and ``state_dict`` read it), so the model's
linear weights take twice their memory. Only float32 weights on the CPU are packed, and only
where ``torch`` was built with oneDNN.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainwire_predictor.generative.lazy import LazyModule

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server

logger = logging.getLogger(__name__)


def available() -> bool:
    """Whether this ``torch`` has oneDNN's packed linear ops."""
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


def pack_linear_layers(model: Any, batch_hint: int = 8) -> int:
    """Packs the weight of every ``nn.Linear`` and GPT-2 ``Conv1D`` of ``model``; returns how many.

    A packed layer's ``forward`` multiplies with the packed copy (its hooks still run around it).

    Args:
        model: A ``torch`` module in eval mode, on the CPU.
        batch_hint: The number of rows the products usually have (oneDNN picks its blocking by it;
            any number of rows works).
    """
    if not available():
        return 0
    packed = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            conv1d = type(module).__name__ == "Conv1D"
            if not (isinstance(module, torch.nn.Linear) or conv1d) or "forward" in vars(module):
                continue
            weight = getattr(module, "weight", None)
            if not isinstance(weight, torch.Tensor) or weight.dtype != torch.float32 or weight.device.type != "cpu":
                continue
            bias = getattr(module, "bias", None)
            if bias is not None and (bias.dtype != torch.float32 or bias.device.type != "cpu"):
                continue
            matrix = weight.detach().t() if conv1d else weight.detach()  # (out, in), as F.linear takes it
            try:
                ready = torch.ops.mkldnn._reorder_linear_weight(matrix.contiguous(), batch_hint)
            except RuntimeError as error:  # an odd shape or build: the layer stays as it was
                logger.debug("layer %s not packed: %s", name, error)
                continue
            module.forward = _forward(module, ready, bias.detach() if bias is not None else None)
            packed += 1
    return packed


def _forward(module: Any, weight: torch.Tensor, bias: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    own = type(module).forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or torch.is_grad_enabled():  # another dtype, or training: the layer's own
            return own(module, x)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")

    return forward
