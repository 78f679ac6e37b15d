"""The KV cache that generation decodes with: transformers' ``DynamicCache``, appending in place.

``DynamicCache`` concatenates each layer's whole cache with every new token (``torch.cat``), so a completion of
``C`` tokens after a ``P``-token prompt copies ``O((P + C)^2)`` keys and values per layer. On a small model that
copy is most of a decode step: with the TRL-pair benchmark's model (``benchmarks/trl_pair.py``: 2.3M parameters,
128 rows x 48 tokens, one CPU thread) ``aten::cat`` took 39% of generation's time in ``torch.profiler``. Here a
full-attention layer writes into a buffer that doubles when full and hands attention a view of its filled part:
the same keys and values, the same attention, and ``O(P + C)`` copying per layer (amortised).
Memory: a buffer holds at most twice its filled length, the peak ``torch.cat`` reaches anyway (the old and the new
cache side by side at each token), but held to the end of the call instead of for a moment.

The cache is an ordinary ``DynamicCache`` (``generate``, ``crop``, ``batch_repeat_interleave`` and the rest work
as before): :func:`decode_cache` only changes the class of its plain ``DynamicLayer`` layers, present and future.
Generation runs under ``torch.no_grad``; the update's forward (which backpropagates through the cache) keeps
transformers' own layer.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer  # caches are built from layers since transformers 4.54

_MIN_CAPACITY = 64  # tokens: the first buffer of a layer holds at least this many


class AppendingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``update`` appends in place (see the module docstring).

    ``keys`` and ``values`` stay ``(B, H, L, D)`` tensors, views of the first ``L`` positions of buffers with
    room for more; a ``keys`` tensor that is not such a view (after ``batch_repeat_interleave``, say) is copied
    into a new buffer at the next update.
    """

    keys: torch.Tensor
    values: torch.Tensor

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``(B, H, T, D)`` keys and values; returns the ``(B, H, L + T, D)`` cached keys and values."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys, self._key_buffer = _append(self.keys, getattr(self, "_key_buffer", None), key_states)
        self.values, self._value_buffer = _append(self.values, getattr(self, "_value_buffer", None), value_states)
        return self.keys, self.values


def _append(cached: torch.Tensor, buffer: torch.Tensor | None, new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cached`` ``(B, H, L, D)`` (or an empty tensor) with ``new`` ``(B, H, T, D)`` after it, as a view of
    ``buffer`` (or of a new, larger one); returns the view and its buffer."""
    length = cached.shape[-2] if cached.dim() == new.dim() else 0
    end = length + new.shape[-2]
    in_buffer = (
        buffer is not None
        and buffer.shape[:-2] == new.shape[:-2]
        and buffer.shape[-2] >= end
        and (length == 0 or (cached.data_ptr() == buffer.data_ptr() and cached.stride() == buffer.stride()))
    )
    if not in_buffer:
        buffer = new.new_empty((*new.shape[:-2], max(2 * end, _MIN_CAPACITY), new.shape[-1]))
        if length:
            buffer[..., :length, :].copy_(cached)
    assert buffer is not None
    buffer[..., length:end, :].copy_(new)
    return buffer[..., :end, :], buffer


def decode_cache(cache: DynamicCache | None = None) -> DynamicCache:
    """``cache`` (default: a new, empty ``DynamicCache``) with its plain ``DynamicLayer`` layers, and those it
    will add, appending in place (:class:`AppendingLayer`). Other layer kinds (sliding windows) are left alone.
    For decoding under ``torch.no_grad`` only."""
    cache = DynamicCache() if cache is None else cache
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = AppendingLayer
    for layer in getattr(cache, "layers", ()):
        if type(layer) is DynamicLayer:
            layer.__class__ = AppendingLayer
    return cache
