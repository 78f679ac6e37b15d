"""The decode loop over a static KV cache, with the per-token forward compiled into a CUDA graph on a GPU.

On a GPU, generation at small batch is bound by kernel launches and Python, not by arithmetic: a 24-layer 0.5B
model spends ~22 ms a token for 128 rows on an H200 doing about 5 TFLOP/s of work
(``docs/trainer/scaling.md``). A CUDA graph replays the whole forward's kernels with one launch, but needs every
shape fixed and every buffer at one address. :class:`StaticDecoder` gives it that:

* the KV cache is transformers' ``StaticCache`` of a fixed length ``L`` (the longest prompt the backend encodes
  plus the token budget), allocated once per ``(N, L)`` and reset, not reallocated, between calls;
* the attention mask is one ``(N, L)`` buffer for the whole call (the prompts' padding, then ones: positions past
  the current token are masked by causality, not by the mask), so its shape never changes;
* the prompt is prefilled by the eager model (its width varies from call to call); each new token then goes
  through ``model.get_compiled_call`` (``torch.compile``, mode ``reduce-overhead``: CUDA graphs), the same
  compiled forward ``model.generate`` uses with ``cache_implementation="static"``.

The tokens are drawn exactly as :func:`trainer.rollout.decode.sample` draws them (:func:`~trainer.rollout.decode.
draw`): ``generate``'s warpers and ``torch.multinomial``, for the same RNG state. Off CUDA the forward is not
compiled (transformers compiles only on CUDA too): the static cache alone, which is what CPU tests check.

This is ``cache_implementation: static`` (transformers' and TRL's name; TRL passes it to ``generate`` with
compilation disabled, so it gets the static cache without the graph).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from transformers import StaticCache

from trainer.rollout.base import SamplingParams
from trainer.rollout.decode import decode_loop, logits_to_keep
from trainer.rollout.forward import cache_keyword, forward_parameters


class StaticDecoder:
    """Samples completions over a static KV cache; on CUDA each decode step is one CUDA-graph replay.

    Args:
        model: a transformers causal LM whose layers all attend to the whole sequence (the caller checks
            :func:`trainer.rollout.forward.prompt_cache_applies`); run as it is (the caller sets eval mode and
            autocast). Its parameters must keep their storage between calls (an optimizer's in-place step does;
            FSDP's resharding does not, so a sharded policy uses ``generate``).
        compile: compile the decode step (default: on CUDA only, as transformers does).
    """

    def __init__(self, model: torch.nn.Module, *, compile: bool | None = None) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.compile = self.device.type == "cuda" if compile is None else compile
        self._caches: dict[tuple[int, int, torch.dtype], Any] = {}
        self._step: Callable[..., Any] | None = None
        self._cache_keyword = cache_keyword(model)
        self._keep = logits_to_keep(model)
        self._takes_cache_position = "cache_position" in forward_parameters(model)  # transformers < 5.20

    def step_forward(self) -> Callable[..., Any]:
        """The decode step's forward: ``model.get_compiled_call`` when compiling, else the model itself."""
        if self._step is None:
            if not self.compile:
                self._step = self.model
            else:
                get = getattr(self.model, "get_compiled_call", None)
                self._step = get(None) if callable(get) else torch.compile(self.model, mode="reduce-overhead")
        return self._step

    def cache(self, rows: int, length: int, dtype: torch.dtype) -> Any:
        """The ``StaticCache`` of ``rows x length`` positions holding keys and values in ``dtype``, emptied; made on
        the first call of that shape and dtype."""
        key = (rows, length, dtype)
        cache = self._caches.get(key)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=length)  # type: ignore[arg-type]
            layer: Any
            for layer in cache.layers:
                layer.__class__ = _casting(type(layer))  # type: ignore[arg-type]
                layer.cache_dtype = dtype
            self._caches[key] = cache
        else:
            cache.reset()
        return cache

    @torch.no_grad()
    def sample(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        sampling: SamplingParams,
        eos_token_ids: list[int] | tuple[int, ...],
        pad_token_id: int,
        max_prompt_length: int | None = None,
    ) -> torch.Tensor:
        """Sample up to ``sampling.max_new_tokens`` tokens after each left-padded prompt.

        Args:
            input_ids, attention_mask: ``(N, P)`` left-padded prompts.
            sampling: temperature (0: greedy), top-p and top-k, and the token budget ``C``.
            eos_token_ids: tokens that end a row; it is padded with ``pad_token_id`` after them.
            max_prompt_length: the widest ``P`` the caller encodes; the cache is ``max_prompt_length + C`` long so
                that one compiled graph serves every call (default: ``P`` rounded up to a multiple of 64).

        Returns:
            ``(N, c)`` long tensor of new tokens, ``c <= C``: where the last row ended (at EOS), else ``C``.

        Raises:
            ValueError: ``max_new_tokens < 1``, an empty prompt, or a prompt wider than ``max_prompt_length``.
        """
        n, width = input_ids.shape
        budget = sampling.max_new_tokens
        if budget < 1 or width < 1:
            raise ValueError(f"sample needs a prompt and max_new_tokens >= 1, got width {width}, budget {budget}")
        room = max_prompt_length if max_prompt_length is not None else -(-width // 64) * 64
        if width > room:
            raise ValueError(f"prompt width {width} is over max_prompt_length {room}")
        length = room + budget
        device = input_ids.device
        cache = self.cache(n, length, _state_dtype(self.model, device))
        mask = attention_mask.new_ones(n, length)  # (N, L): the prompts' padding, then ones (causality masks ahead)
        mask[:, :width] = attention_mask
        keywords = {self._cache_keyword: cache, **self._keep}
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, P)
        forward = self.step_forward()
        graphs = self.compile and device.type == "cuda"

        def step(token: torch.Tensor | None, t: int) -> torch.Tensor:
            nonlocal positions
            if token is None:  # the prompts, eagerly (their width varies from call to call)
                return self.model(
                    input_ids=input_ids,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    **self._cache_position(torch.arange(width, device=device)),
                    **keywords,
                ).logits[:, -1]  # (N, V)
            positions = positions[:, -1:] + 1  # (N, 1)
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()  # the last replay's outputs are consumed
            return forward(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **self._cache_position(torch.full((1,), width + t - 1, dtype=torch.long, device=device)),
                **keywords,
            ).logits[:, -1]  # (N, V)

        return decode_loop(step, input_ids, sampling, eos_token_ids, pad_token_id)

    def _cache_position(self, positions: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"cache_position": positions}`` for a forward that takes it (before transformers 5.20, where the
        static cache is written at those positions), else ``{}`` (the cache counts its own length)."""
        return {"cache_position": positions} if self._takes_cache_position else {}


@functools.cache
def _casting(layer_class: Any) -> type:
    """``layer_class`` storing keys and values in one dtype, its instances' ``cache_dtype`` (one class per layer
    class). Under autocast the keys come out of the rotary embedding in float32 and the values in bf16, and a static
    layer allocates both in the keys' dtype (transformers 5.17) or each in its own (5.25); attention then reads
    them in the autocast dtype either way."""

    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        dtype = self.cache_dtype
        return layer_class.update(self, key_states.to(dtype), value_states.to(dtype), *args, **kwargs)

    return type(f"Casting{layer_class.__name__}", (layer_class,), {"update": update})


def _state_dtype(model: torch.nn.Module, device: torch.device) -> torch.dtype:
    """The dtype attention computes in: autocast's on ``device`` when it is on, else the model's parameters'."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype
