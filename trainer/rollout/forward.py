"""The policy's forward over a rollout batch: the log-probs (and entropies) of its completion tokens.

:func:`completion_log_probs` recomputes the log-probs of a batch with the policy (or the reference model) using
the same positions that generation used, so the importance ratio of an unchanged policy is exactly 1. It is the
same for every backend: the loss always runs on the trainer's own forward.

Shapes: ``N`` completions, ``P`` prompt tokens (left-padded), ``C`` completion tokens (right-padded), ``V``
vocabulary.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.utils.checkpoint
from transformers import DynamicCache

from trainer.algorithms.logprobs import entropy_from_logits, sampling_support, token_log_probs
from trainer.distributed import unwrap
from trainer.rollout.base import RolloutBatch


def completion_log_probs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    temperature: float,
    *,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy_grad: bool = False,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and optionally entropies) of the completion tokens under ``model``.

    Positions are ``cumsum(attention_mask) - 1``, as ``generate`` computes them for left-padded prompts; without
    them a padded prompt would be scored at other positions than it was sampled at. Logits are divided by the
    sampling ``temperature`` (as TRL does) so the ratio compares the distribution that was sampled; with ``top_k``
    or ``top_p`` the softmax is renormalised over the tokens the sampler could draw (:func:`trainer.algorithms.logprobs.
    sampling_support`), so the log-probs are those of the truncated distribution the completions came from. (TRL
    takes the full softmax there, which makes top-k/top-p rollouts slightly off-policy.) Entropies stay those of
    the full distribution.

    Memory: unchunked, the ``(N, C, V)`` logits exist in float32 several times over (the LM head's output, the
    temperature-scaled copy kept for the backward pass, the entropy's temporaries): at Qwen's 152k vocabulary,
    ``C = 1024`` and ``N = 8`` that is about 5 GB per copy. With ``chunk_tokens`` the LM head is applied to
    ``chunk_tokens`` completion positions at a time, inside the model's forward (so DDP and FSDP see an ordinary
    forward), and each chunk's logits are recomputed in the backward pass instead of kept
    (``torch.utils.checkpoint``): extra memory is about ``chunk_tokens * V`` floats, whatever ``N`` and ``C``.
    Models whose LM head is not a plain linear layer, or that post-process logits (Gemma's soft-capping), take
    the unchunked path.

    Args:
        model: policy or reference model (or its DDP/FSDP wrapper), on the batch's device.
        batch: a :class:`RolloutBatch` (usually a micro-batch from :meth:`RolloutBatch.select`).
        temperature: the sampling temperature (> 0).
        with_entropy: also return per-token entropies (detached).
        chunk_tokens: completion positions whose logits are computed at once; ``None`` computes all at once.
        top_k, top_p: the sampling truncation (0 and 1.0: none).
        entropy_grad: the entropies keep their graph, for an entropy bonus (``entropy_coeff``); implies
            ``with_entropy``. On the chunked path they leave the model as a second channel of the head's output, so
            DDP and FSDP see them as an ordinary output too.
        share_prompts: run each prompt once for all the completions that share it (:func:`shared_prompt_hidden`)
            where that applies; elsewhere, and with ``False``, every row's prompt is run again.

    Returns:
        ``(logp, entropy)``: ``(N, C)`` float32 each; ``entropy`` is ``None`` unless asked for. Grad flows into
        ``logp`` (and, with ``entropy_grad``, into ``entropy``) when called with grad enabled.
    """
    with_entropy = with_entropy or entropy_grad
    input_ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)  # (N, P + C)
    attention_mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)  # (N, P + C)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, P + C)
    c = batch.completion_ids.shape[1]

    def forward() -> Any:
        return model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=c + 1,
        )

    head = _plain_lm_head(model)
    hidden = shared_prompt_hidden(model, batch, position_ids) if share_prompts and head is not None else None
    if hidden is not None:  # (N, C, H)
        assert head is not None
        return _hidden_log_probs(
            hidden, head, batch.completion_ids, temperature, chunk_tokens, with_entropy, top_k, top_p, entropy_grad
        )
    if chunk_tokens is None or head is None:
        logits = forward().logits[:, :-1, :] / temperature  # (N, C, V): position t predicts completion token t
        return _log_probs_of_logits(logits, batch.completion_ids, top_k, top_p, with_entropy, entropy_grad)
    with _chunked_lm_head(
        head, batch.completion_ids, temperature, chunk_tokens, with_entropy, top_k, top_p, entropy_grad
    ) as stats:
        out = forward().logits  # (N, C, 1), or (N, C, 2) with entropy_grad: the log-probs (and entropies) themselves
    return out[..., 0], out[..., 1] if entropy_grad else stats.get("entropy")


def _log_probs_of_logits(
    logits: torch.Tensor, tokens: torch.Tensor, top_k: int, top_p: float, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(N, C)`` log-probs of ``tokens`` under ``(N, C, V)`` temperature-scaled ``logits`` (over the sampler's
    support), and their entropies when asked for (with their graph under ``entropy_grad``)."""
    support = sampling_support(logits, top_k, top_p)  # (N, C, V) or None
    logp = token_log_probs(logits, tokens, support)  # (N, C)
    entropy = entropy_from_logits(logits if entropy_grad else logits.detach()) if with_entropy else None
    return logp, entropy


def _hidden_log_probs(
    hidden: torch.Tensor,
    head: torch.nn.Linear,
    tokens: torch.Tensor,
    temperature: float,
    chunk_tokens: int | None,
    with_entropy: bool,
    top_k: int,
    top_p: float,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(N, C)`` log-probs (and entropies) of ``tokens`` from ``(N, C, H)`` final hidden states through ``head``:
    all logits at once, or ``chunk_tokens`` positions at a time (:func:`chunked_token_log_probs`)."""
    if chunk_tokens is None:
        logits = head(hidden) / temperature  # (N, C, V)
        return _log_probs_of_logits(logits, tokens, top_k, top_p, with_entropy, entropy_grad)
    return chunked_token_log_probs(
        hidden,
        head.weight,
        head.bias,
        tokens,
        temperature,
        chunk_tokens,
        with_entropy=with_entropy,
        top_k=top_k,
        top_p=top_p,
        entropy_grad=entropy_grad,
    )


def prefill(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, DynamicCache]:
    """Left-padded prompts through ``model``'s decoder (no LM head) with a fresh KV cache, at the positions
    ``generate`` gives them (``cumsum(mask) - 1``).

    Args:
        model: a model for which :func:`prompt_cache_applies`.
        ids, mask: ``(n, P)`` prompt ids and attention mask.

    Returns:
        ``(n, P, H)`` final hidden states and the filled cache (with its graph when grad is enabled).
    """
    decoder: Any = model.get_decoder()  # type: ignore[operator]  # checked callable by prompt_cache_applies
    cache = DynamicCache()
    out = decoder(
        input_ids=ids,
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        **{cache_keyword(decoder): cache},
    )
    return out.last_hidden_state, cache


def shared_prompt_hidden(
    model: torch.nn.Module, batch: RolloutBatch, position_ids: torch.Tensor
) -> torch.Tensor | None:
    """The final hidden states that predict each completion token, each distinct prompt run once for its group.

    A group's ``G`` completions share their prompt (the same ids, the same left padding), so its hidden states and
    KV cache are the same for all of them. Here each run of equal consecutive prompt rows is run once (``U`` rows,
    with the KV cache kept), the cache is copied to the ``N`` rows that share it, and only the completions run on
    top of it: the prompt's share of the forward and backward shrinks by ``G``. Attention sees the same keys and
    values at the same positions, so the result equals the full forward's to float rounding, gradients included
    (the copy's gradient sums over the group's rows). The shared-prefix forward of Prefix Grouper (arXiv
    2506.05433), here through the model's own KV cache.

    Applies to one process's plain model (a DDP wrapper, or FSDP, would see two forwards before one backward),
    without gradient checkpointing (which turns the cache off), with full attention in every layer (no sliding
    window), and when some prompt is shared (``U < N``); otherwise returns ``None`` and the caller runs the full
    forward.

    Args:
        model: the policy or reference model.
        batch: the rollout (micro-)batch; rows that share a prompt are consecutive, as generation lays them out.
        position_ids: ``(N, P + C)`` positions of ``prompt + completion``, as the full forward uses them.

    Returns:
        ``(N, C, H)`` hidden states: position ``t`` predicts completion token ``t``; or ``None``.
    """
    inner = unwrap(model)
    if inner is not model or not prompt_cache_applies(inner):
        return None
    key = torch.cat([batch.prompt_ids, batch.prompt_mask], dim=1)  # (N, 2P)
    _, inverse, counts = torch.unique_consecutive(key, dim=0, return_inverse=True, return_counts=True)  # (N,), (U,)
    first = counts.cumsum(0) - counts  # (U,) the first row of each prompt
    n, p = batch.prompt_ids.shape
    c = batch.completion_ids.shape[1]
    if len(first) == n or c == 0:
        return None
    prompt_hidden, cache = prefill(inner, batch.prompt_ids[first], batch.prompt_mask[first])  # (U, P, H)
    last = prompt_hidden[:, -1:][inverse]  # (N, 1, H): predicts completion token 0
    if c == 1:
        return last
    cache.batch_select_indices(inverse)  # (U, ...) -> (N, ...), with its graph
    attention_mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)[:, : p + c - 1]  # (N, P + C - 1)
    decoder: Any = inner.get_decoder()  # type: ignore[operator]  # checked callable by prompt_cache_applies
    completion_out = decoder(
        input_ids=batch.completion_ids[:, :-1],
        attention_mask=attention_mask,
        position_ids=position_ids[:, p : p + c - 1],
        use_cache=True,
        **{cache_keyword(decoder): cache},
    )
    return torch.cat([last, completion_out.last_hidden_state], dim=1)  # (N, C, H)


def cache_keyword(model: torch.nn.Module) -> str:
    """The name under which ``model``'s forward (and ``generate``) takes a KV cache: ``cache`` from transformers
    5.20, ``past_key_values`` before (a peft model is looked through to its base model)."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def forward_parameters(model: torch.nn.Module) -> Mapping[str, inspect.Parameter]:
    """The parameters of ``model``'s forward, by name (a peft model is looked through to its base model's)."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    return inspect.signature(base.forward).parameters


def prompt_cache_applies(model: torch.nn.Module) -> bool:
    """Whether a prompt's KV cache can be computed once and copied to the rows that share it
    (:func:`shared_prompt_hidden`, and generation's shared prefill): a transformers decoder with a KV cache, no
    gradient checkpointing, and no sliding-window or non-attention layers."""
    config = getattr(model, "config", None)
    if config is None or not callable(getattr(model, "get_decoder", None)):
        return False
    new_name = hasattr(model, "is_activation_checkpointing")  # transformers >= 5.20's name, or the older one
    if getattr(model, "is_activation_checkpointing" if new_name else "is_gradient_checkpointing", False):
        return False
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True):
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ["full_attention"])


def _plain_lm_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's LM head when it is a plain ``nn.Linear`` whose output the model returns as is, else ``None``."""
    inner = unwrap(model)
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    config = getattr(inner, "config", None)
    softcapped = getattr(config, "final_logit_softcapping", None) is not None
    return head if type(head) is torch.nn.Linear and not softcapped else None


@contextlib.contextmanager
def _chunked_lm_head(
    head: torch.nn.Linear,
    tokens: torch.Tensor,
    temperature: float,
    chunk_tokens: int,
    with_entropy: bool,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy_grad: bool = False,
) -> Iterator[dict[str, torch.Tensor]]:
    """While inside, ``head`` returns ``(N, C, 1)`` log-probs of ``tokens`` instead of ``(N, C + 1, V)`` logits
    (``(N, C, 2)`` with ``entropy_grad``: log-probs and entropies, both with grad).

    A pre-hook takes the head's input (the final hidden states) and hands the head an empty one, so the full
    logits are never computed; a forward hook then returns the chunked log-probs in place of the head's output.
    Both run inside the model's forward, where FSDP has gathered the head's weight. Entropies, when asked for,
    land in the yielded dict under ``"entropy"``.
    """
    stats: dict[str, torch.Tensor] = {}
    hidden: list[torch.Tensor] = []

    def pre_hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden.append(args[0])  # (N, C + 1, H)
        return (args[0][:, :0], *args[1:])

    def post_hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        h = hidden.pop()[:, :-1]  # (N, C, H): position t predicts completion token t
        logp, entropy = _hidden_log_probs(
            h, head, tokens, temperature, chunk_tokens, with_entropy, top_k, top_p, entropy_grad
        )
        if entropy_grad:
            assert entropy is not None
            return torch.stack([logp, entropy], dim=-1)  # (N, C, 2)
        if entropy is not None:
            stats["entropy"] = entropy
        return logp.unsqueeze(-1).clone()  # (N, C, 1); a copy, since FSDP warns about returning a view

    handles = [head.register_forward_pre_hook(pre_hook), head.register_forward_hook(post_hook)]
    try:
        yield stats
    finally:
        for handle in handles:
            handle.remove()


def chunked_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: float,
    chunk_tokens: int,
    *,
    with_entropy: bool = False,
    top_k: int = 0,
    top_p: float = 1.0,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``tokens`` under ``softmax((hidden @ weight.T + bias) / temperature)``, ``chunk_tokens``
    positions at a time; with grad enabled each chunk's logits are recomputed in the backward pass. With
    ``top_k``/``top_p`` the softmax is renormalised over the sampler's support, as in :func:`completion_log_probs`.

    Args:
        hidden: ``(N, C, H)`` final hidden states (position t predicts ``tokens[:, t]``).
        weight: ``(V, H)`` LM head; ``bias``: ``(V,)`` or ``None``.
        tokens: ``(N, C)`` token ids.
        temperature: logits are divided by it.
        chunk_tokens: positions per chunk.
        with_entropy: also return the entropies of the same distributions (detached).
        top_k, top_p: the sampling truncation (0 and 1.0: none).
        entropy_grad: the entropies keep their graph (implies ``with_entropy``); each chunk's logits then serve both
            and are recomputed once in the backward pass.

    Returns:
        ``(logp, entropy)``: ``(N, C)`` float32 each, ``entropy`` ``None`` unless asked for.
    """
    with_entropy = with_entropy or entropy_grad
    n, c, h = hidden.shape
    flat_h = hidden.reshape(n * c, h)  # (N*C, H)
    flat_t = tokens.reshape(n * c)  # (N*C,)
    keep = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    logps, entropies = [], []
    for lo in range(0, n * c, chunk_tokens):
        args = (flat_h[lo : lo + chunk_tokens], weight, bias, flat_t[lo : lo + chunk_tokens], temperature, top_k, top_p)
        if entropy_grad:
            both = _chunk_log_probs_and_entropy
            logp, entropy = torch.utils.checkpoint.checkpoint(both, *args, use_reentrant=False) if keep else both(*args)
            logps.append(logp)  # (k,)
            entropies.append(entropy)  # (k,)
            continue
        if keep:
            logp = torch.utils.checkpoint.checkpoint(_chunk_log_probs, *args, use_reentrant=False)
        else:
            logp = _chunk_log_probs(*args)
        logps.append(logp)  # (k,)
        if with_entropy:
            with torch.no_grad():
                entropies.append(entropy_from_logits(_chunk_logits(args[0], weight, bias, temperature)))  # (k,)
    logp = torch.cat(logps).reshape(n, c)
    return logp, torch.cat(entropies).reshape(n, c) if with_entropy else None


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """``(k, V)`` float32 logits of ``(k, H)`` hidden states, divided by ``temperature``."""
    return torch.nn.functional.linear(h, weight, bias).float() / temperature


def _chunk_log_probs(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
) -> torch.Tensor:
    logits = _chunk_logits(h, weight, bias, temperature)  # (k, V)
    return token_log_probs(logits, tokens, sampling_support(logits, top_k, top_p))  # (k,)


def _chunk_log_probs_and_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = _chunk_logits(h, weight, bias, temperature)  # (k, V)
    return token_log_probs(logits, tokens, sampling_support(logits, top_k, top_p)), entropy_from_logits(logits)
