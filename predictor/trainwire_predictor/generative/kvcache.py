"""The decode batch's keys and values, kept in buffers allocated ahead of the tokens that fill them.

``transformers``' ``DynamicCache`` appends a step's keys and values with ``torch.cat``: every
decode step copies every layer's whole cache, and a batch that gains or loses a row was copied
again to pad or drop it. For a 124M model with 8 rows of 528 tokens that is about 300 MB
copied per copy, more than the step's own arithmetic. Here each layer's keys and values live
in one buffer ``(rows, heads, columns, head_dim)`` with room to the right: a step writes its
column in place and the attention reads views, a leaving row is replaced by the last row (one
row copied), a joining row is written into free rows, and the buffers are reallocated only when
they run out of rows or columns (amortized: they grow by a quarter at least).

Rows share the columns: row i's tokens fill the columns before ``end`` (the last of them at
``end - 1``), padded on the left and masked where a row has no token, as ``transformers``'
batched ``generate`` pads. Leading columns no row uses any more are dropped from the attention
(``start`` moves right) and reclaimed at the next reallocation.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from trainwire_predictor.generative.lazy import LazyModule

if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")  # loaded with the first generative model, not with the server


class BatchCache:
    """Every active row's keys and values per layer, its mask and its next position id.

    Args:
        layers: Per layer, (keys, values) of the first rows to hold, each ``(rows, heads, T, head_dim)``.
        mask: ``(rows, T)``: 1 where a row has a token.
        positions: ``(rows,)``: each row's next position id.
    """

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, positions: torch.Tensor):
        self.rows = 0
        self.start = self.end = 0
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._mask = torch.zeros(0, 0, dtype=torch.long)
        self._positions = torch.zeros(0, dtype=torch.long)
        self._shapes = [(k.shape[1], k.shape[3], k.dtype, v.shape[1], v.shape[3], v.dtype) for k, v in layers]
        self.add(layers, mask, positions)

    @property
    def width(self) -> int:
        """Columns the attention reads now."""
        return self.end - self.start

    @property
    def nbytes(self) -> int:
        """Bytes the buffers hold (allocated, used or not)."""
        return sum(t.numel() * t.element_size() for t in [*self._keys, *self._values])

    def _reserve(self, rows: int, before: int, after: int) -> None:
        """Room for ``rows`` rows, ``before`` columns before ``end`` and ``after`` from it on."""
        capacity_rows = self._mask.shape[0]
        capacity_columns = self._mask.shape[1]
        if rows <= capacity_rows and before <= self.end and self.end + after <= capacity_columns:
            return
        width = self.width
        end = max(before, width)
        headroom = max(after, 64, end // 4)  # grows by a quarter at least: reallocations stay rare
        new_rows = rows if rows > capacity_rows else capacity_rows
        if rows > capacity_rows:
            new_rows = max(rows, min(2 * capacity_rows, rows + 8))
        columns = end + headroom
        start = end - width
        keys, values = [], []
        for i, (heads_k, dim_k, dtype_k, heads_v, dim_v, dtype_v) in enumerate(self._shapes):
            # Zeros, not empty: a masked column's value still meets a zero weight, and 0 * NaN is NaN.
            k = torch.zeros(new_rows, heads_k, columns, dim_k, dtype=dtype_k)
            v = torch.zeros(new_rows, heads_v, columns, dim_v, dtype=dtype_v)
            if self.rows and width:
                k[: self.rows, :, start:end] = self._keys[i][: self.rows, :, self.start : self.end]
                v[: self.rows, :, start:end] = self._values[i][: self.rows, :, self.start : self.end]
            keys.append(k)
            values.append(v)
        mask = torch.zeros(new_rows, columns, dtype=torch.long)
        positions = torch.zeros(new_rows, dtype=torch.long)
        if self.rows:
            mask[: self.rows, start:end] = self._mask[: self.rows, self.start : self.end]
            positions[: self.rows] = self._positions[: self.rows]
        self._keys, self._values, self._mask, self._positions = keys, values, mask, positions
        self.start, self.end = start, end

    def add(self, layers: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, positions: torch.Tensor) -> None:
        """Appends n rows: per layer (keys, values) ``(n, heads, T, head_dim)``, mask ``(n, T)``, positions ``(n,)``."""
        count, columns = mask.shape
        self._reserve(self.rows + count, columns, 1)
        if columns > self.width:
            # The new rows reach further left: the old rows are padded there (stale columns masked).
            self.start = self.end - columns
            self._mask[: self.rows, self.start : self.end - self.width] = 0
        rows = slice(self.rows, self.rows + count)
        left = self.end - columns
        for i, (k, v) in enumerate(layers):
            self._keys[i][rows, :, left : self.end] = k
            self._values[i][rows, :, left : self.end] = v
        self._mask[rows, self.start : self.end] = 0
        self._mask[rows, left : self.end] = mask
        self._positions[rows] = positions
        self.rows += count

    def drop(self, rows: list[int]) -> list[int]:
        """Removes ``rows``; returns the new order of the rows left (old row numbers).

        Each removed row takes the last row's place (one row copied per layer), so the
        others keep theirs; leading columns no row uses any more leave the attention.
        """
        order = list(range(self.rows))
        for row in sorted(rows, reverse=True):
            last = self.rows - 1
            if row != last:
                for k, v in zip(self._keys, self._values):
                    k[row, :, self.start : self.end] = k[last, :, self.start : self.end]
                    v[row, :, self.start : self.end] = v[last, :, self.start : self.end]
                self._mask[row, self.start : self.end] = self._mask[last, self.start : self.end]
                self._positions[row] = self._positions[last]
                order[row] = order[last]
            order.pop()
            self.rows -= 1
        if self.rows:
            used = self._mask[: self.rows, self.start : self.end].any(0).nonzero()
            self.start += int(used[0]) if used.numel() else self.width
        return order

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One decode step's attention mask ``(rows, width + 1)``, position ids ``(rows, 1)`` and cache.

        The cache writes the step's keys and values in place (call ``stepped`` after the pass).
        """
        self._reserve(self.rows, 0, 1)
        self._mask[: self.rows, self.end] = 1
        mask = self._mask[: self.rows, self.start : self.end + 1]
        positions = self._positions[: self.rows].unsqueeze(1).clone()  # stepped() moves the buffer on
        return mask, positions, _cache([_Layer(self, i) for i in range(len(self._keys))])

    def stepped(self) -> None:
        """The decode pass wrote its column: every row moves one token on."""
        self.end += 1
        self._positions[: self.rows] += 1

    def write(self, i: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes a step's keys and values of layer ``i`` at ``end``; returns the layer's views through them."""
        end = self.end + keys.shape[-2]
        self._keys[i][: self.rows, :, self.end : end] = keys
        self._values[i][: self.rows, :, self.end : end] = values
        return self._keys[i][: self.rows, :, self.start : end], self._values[i][: self.rows, :, self.start : end]

    def layer(self, i: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``i``'s keys and values of the active rows (views), the last ``width`` columns."""
        start = self.start if width is None else self.end - width
        return (self._keys[i][: self.rows, :, start : self.end], self._values[i][: self.rows, :, start : self.end])


def _cache(layers: list[Any]) -> Any:
    """A ``DynamicCache`` over ``layers`` (``_BatchLayer`` objects)."""
    return _classes()[0](layers)


def _Layer(batch: BatchCache, index: int) -> Any:  # noqa: N802 - a class made on first use
    return _classes()[1](batch, index)


def past_cache(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A ``DynamicCache`` that starts from ``layers`` as they are (expanded views too), copying nothing.

    ``DynamicCache(ddp_cache_data=...)`` concatenates the given tensors onto empty ones: one
    whole copy of the past before the pass appends to it (another).
    """
    cache_class, _, layer_class = _classes()
    return cache_class([layer_class(k, v) for k, v in layers])


@functools.cache
def _classes() -> tuple[Any, Any, Any]:
    """The cache classes, made when ``transformers`` is first needed (not with the server)."""
    from transformers import DynamicCache
    from transformers.cache_utils import Cache, DynamicLayer

    class _BatchDynamicCache(DynamicCache):
        def __init__(self, layers: list[Any]) -> None:
            Cache.__init__(self, layers=layers)

    class _BatchLayer(DynamicLayer):
        """One layer of a ``BatchCache`` as ``transformers`` reads it: a step writes in place."""

        def __init__(self, batch: BatchCache, index: int) -> None:
            super().__init__()
            self._batch, self._index = batch, index
            self.keys, self.values = batch.layer(index)
            self.device = self.keys.device
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            self.keys, self.values = self._batch.write(self._index, key_states, value_states)
            return self.keys, self.values

    class _PastLayer(DynamicLayer):
        """A layer whose past is given tensors, used as they are: the pass's update concatenates once."""

        def __init__(self, keys: Any, values: Any) -> None:
            super().__init__()
            self.keys, self.values = keys, values
            self.device = keys.device
            self.is_initialized = True

    return _BatchDynamicCache, _BatchLayer, _PastLayer
