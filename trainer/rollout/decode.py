"""The decode loop: sampling with a KV cache, as ``model.generate`` samples, without its per-token bookkeeping.

``generate`` is general (beams, streamers, assistants, every logits processor and stopping criterion), and on a
small model its loop is a visible share of generation: re-preparing the inputs and concatenating the attention
mask and the token ids every step, running the stopping criteria. :func:`sample` is the loop GRPO needs and no
more: one forward per token on the new token alone, the attention mask a growing view of one buffer, positions
counted up, the next token drawn from the last position's float32 logits through ``transformers``' own
temperature, top-k and top-p warpers (in ``generate``'s order, with its ``min_tokens_to_keep=1``) and
``torch.multinomial`` (``argmax`` at temperature 0), and rows that reached EOS padded from then on. Given the same
RNG state it draws the same tokens as ``generate`` with the same sampling settings (``tests/trainer/test_decode.py``
checks it), with none of the checkpoint's own ``generation_config`` (repetition penalty, suppressed tokens):
exactly the distribution the loss computes log-probs of.

On CUDA the check "have all rows ended?" reads the device only every ``_CUDA_STOP_CHECK_EVERY`` tokens (each read
waits for the GPU); the few extra steps this may run produce only padding, which is cut off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from trainer.rollout.base import SamplingParams
from trainer.rollout.forward import cache_keyword, forward_parameters

_CUDA_STOP_CHECK_EVERY = 8  # tokens between reads of "all rows ended" on a GPU


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    cache: Any,
    sampling: SamplingParams,
    eos_token_ids: list[int] | tuple[int, ...],
    pad_token_id: int,
) -> torch.Tensor:
    """Sample up to ``sampling.max_new_tokens`` tokens after each left-padded prompt.

    Args:
        model: a causal LM whose forward takes a KV cache (:func:`trainer.rollout.forward.cache_keyword`); run as
            it is (the caller sets eval mode and autocast).
        input_ids, attention_mask: ``(N, P)`` left-padded prompts.
        cache: a KV cache holding the first ``K`` prompt positions (``0 <= K < P``): empty, or prefilled once per
            prompt and repeated (``TransformersBackend._prompt_cache``); filled further in place.
        sampling: temperature (0: greedy), top-p and top-k, and the token budget ``C``.
        eos_token_ids: tokens that end a row; it is padded with ``pad_token_id`` after them.

    Returns:
        ``(N, c)`` long tensor of new tokens, ``c <= C``: ``c`` is where the last row ended (at EOS), else ``C``.

    Raises:
        ValueError: ``K >= P`` (no prompt token left to feed), or ``max_new_tokens < 1``.
    """
    n, width = input_ids.shape
    budget = sampling.max_new_tokens
    cached = int(cache.get_seq_length())
    if cached >= width or budget < 1:
        raise ValueError(f"sample needs cached < prompt width and max_new_tokens >= 1, got {cached}, {width}, {budget}")
    mask = torch.cat([attention_mask, attention_mask.new_ones(n, budget)], dim=1)  # (N, P + C): viewed, never copied
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]  # (N, P - K)
    keywords = {cache_keyword(model): cache, **logits_to_keep(model)}

    def step(token: torch.Tensor | None, t: int) -> torch.Tensor:
        nonlocal positions
        if token is not None:
            positions = positions[:, -1:] + 1  # (N, 1)
        return model(
            input_ids=input_ids[:, cached:] if token is None else token[:, None],  # (N, P - K), then (N, 1)
            attention_mask=mask[:, : width + t],
            position_ids=positions,
            use_cache=True,
            **keywords,
        ).logits[:, -1]  # (N, V)

    return decode_loop(step, input_ids, sampling, eos_token_ids, pad_token_id)


def decode_loop(
    step: Callable[[torch.Tensor | None, int], torch.Tensor],
    input_ids: torch.Tensor,
    sampling: SamplingParams,
    eos_token_ids: list[int] | tuple[int, ...],
    pad_token_id: int,
) -> torch.Tensor:
    """The loop both decoders share: ``step(None, 0)`` feeds the prompts and ``step(token, t)`` the ``(N,)`` tokens
    drawn at ``t - 1``, each returning the next position's ``(N, V)`` logits; a token is drawn from them
    (:func:`draw`), rows that drew an EOS end, and the loop stops when every row has ended (read every
    :func:`stop_check_every` tokens) or at the budget ``C``.

    Args:
        input_ids: the ``(N, P)`` prompts (their rows, device and dtype).

    Returns:
        ``(N, c)`` long tensor of new tokens, ``c <= C``: ``c`` is where the last row ended (at EOS), else ``C``.
    """
    n, budget, device = input_ids.shape[0], sampling.max_new_tokens, input_ids.device
    warpers = warpers_for(sampling)
    eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)
    out = input_ids.new_full((n, budget), pad_token_id)  # (N, C)
    alive = torch.ones(n, dtype=torch.bool, device=device)  # (N,) rows that have not reached EOS
    check_every = stop_check_every(device)
    token: torch.Tensor | None = None
    steps = budget
    for t in range(budget):
        token = draw(step(token, t), out, warpers, sampling, alive, pad_token_id)  # (N,)
        out[:, t] = token
        alive &= ~torch.isin(token, eos)
        if ((t + 1) % check_every == 0 or t + 1 == budget) and not bool(alive.any()):
            steps = t + 1
            break
    if check_every > 1 and steps < budget:
        steps = last_needed_step(out[:, :steps], eos)
    return out[:, :steps]


def draw(
    logits: torch.Tensor,
    out: torch.Tensor,
    warpers: list[Any],
    sampling: SamplingParams,
    alive: torch.Tensor,
    pad_token_id: int,
) -> torch.Tensor:
    """The next token of each row from its last position's ``(N, V)`` logits, as ``generate`` draws it: float32
    scores through ``warpers`` (given the ``(N, C)`` tokens ``out`` so far), ``torch.multinomial`` (``argmax`` at
    temperature 0); rows no longer ``alive`` get ``pad_token_id``. Returns an ``(N,)`` long tensor."""
    scores = logits.to(dtype=torch.float32, copy=True)  # (N, V), as generate takes them (a copy: a CUDA graph's
    # output buffer is overwritten by its next replay)
    for warp in warpers:
        scores = warp(out, scores)
    if sampling.temperature > 0:
        token = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)  # (N,)
    else:
        token = scores.argmax(dim=-1)  # (N,)
    return torch.where(alive, token, pad_token_id)


def stop_check_every(device: torch.device) -> int:
    """Tokens between reads of "have all rows ended?": every token on a CPU (a read costs nothing there),
    ``_CUDA_STOP_CHECK_EVERY`` on a GPU (a read waits for the queued kernels)."""
    return _CUDA_STOP_CHECK_EVERY if device.type == "cuda" else 1


def warpers_for(sampling: SamplingParams) -> list[Any]:
    """``generate``'s sampling warpers for these settings, in its order (none when greedy)."""
    if sampling.temperature <= 0:
        return []
    warpers: list[Any] = []
    if sampling.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        warpers.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return warpers


def logits_to_keep(model: torch.nn.Module) -> dict[str, int]:
    """``{"logits_to_keep": 1}`` where the model's forward takes it (only the last position's logits are needed:
    the prompt's other positions then skip the LM head), else ``{}``; a peft model is looked through."""
    return {"logits_to_keep": 1} if "logits_to_keep" in forward_parameters(model) else {}


def last_needed_step(tokens: torch.Tensor, eos: torch.Tensor) -> int:
    """The number of leading columns of ``(N, c)`` ``tokens`` (every row ended within them) up to the latest
    first EOS of any row: the columns after it are padding in every row."""
    is_eos = torch.isin(tokens, eos)  # (N, c)
    first = is_eos.to(torch.int64).argmax(-1)  # (N,)
    return int(first.max()) + 1
