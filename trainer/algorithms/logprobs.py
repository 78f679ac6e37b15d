"""Log-probabilities and entropies from logits, as the sampler's top-k/top-p truncation sees them.

Pure tensor functions (``tests/trainer/test_grpo.py`` checks them against ``transformers``' own warpers);
:func:`trainer.rollout.forward.completion_log_probs` runs them over a model's forward.

Shapes: ``B`` completions, ``T`` completion tokens, ``V`` vocabulary size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: The log-prob given to a token that top-k/top-p sampling could not have drawn (see :func:`token_log_probs`).
OUTSIDE_SUPPORT_LOGP = -1e4


def sampling_support(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor | None:
    """Which tokens top-k and then top-p sampling can draw, as ``transformers``' ``TopKLogitsWarper`` and
    ``TopPLogitsWarper`` decide it (ties at the k-th value kept; the most likely token always kept).

    Args:
        logits: ``(..., V)``, already divided by the temperature.
        top_k: keep the k most likely tokens (0 keeps all).
        top_p: then keep the smallest set with this much probability (1.0 keeps all).

    Returns:
        ``(..., V)`` bool, True where a token can be sampled; ``None`` when neither knob truncates.
    """
    if top_k <= 0 and top_p >= 1.0:
        return None
    logits = logits.detach().float()
    keep = torch.ones_like(logits, dtype=torch.bool)  # (..., V)
    if 0 < top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1)
        keep = logits >= kth
    if top_p < 1.0:
        filtered = logits.masked_fill(~keep, -math.inf)  # (..., V): top-p acts on what top-k kept
        ascending, order = torch.sort(filtered, dim=-1)  # (..., V)
        cumulative = ascending.softmax(-1).cumsum(-1)  # (..., V)
        drop_sorted = cumulative <= 1.0 - top_p
        drop_sorted[..., -1] = False  # the most likely token stays
        keep = keep & ~torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return keep


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor, support: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probability of each chosen token, ``log softmax(logits)[token]``, without a ``(B, T, V)`` copy.

    With ``support`` (from :func:`sampling_support`) the softmax is renormalised over the tokens the sampler could
    draw, so the log-probs are those of the truncated distribution that top-k/top-p sampling drew from; a token
    outside the support (a padding position, or a sampled token the updated policy no longer keeps) gets
    :data:`OUTSIDE_SUPPORT_LOGP` without gradient: finite, so two of them give a log-ratio of 0, not NaN.

    Args:
        logits: ``(B, T, V)``; the caller has already divided by the sampling temperature.
        tokens: ``(B, T)`` token ids.
        support: ``(B, T, V)`` bool, or ``None`` for the full softmax.

    Returns:
        ``(B, T)`` float32 log-probs.
    """
    if support is not None:
        logits = logits.float().masked_fill(~support, -math.inf)  # (B, T, V)
        kept = support.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
        chosen = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
        logp = chosen - torch.logsumexp(logits, dim=-1)  # (B, T), -inf outside the support
        return torch.where(kept, logp, torch.full_like(logp, OUTSIDE_SUPPORT_LOGP))
    if logits.dtype in (torch.float32, torch.float64):
        chosen = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return (chosen - torch.logsumexp(logits, dim=-1)).float()  # (B, T)
    # bf16 logsumexp loses too many digits; go row by row in float32 to bound the extra memory.
    rows = [
        F.log_softmax(row.float(), dim=-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)  # (T,)
        for row, tok in zip(logits, tokens, strict=True)
    ]
    return torch.stack(rows)  # (B, T)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each next-token distribution, ``-sum_v p_v log p_v``.

    Args:
        logits: ``(B, T, V)``.

    Returns:
        ``(B, T)`` float32 entropies in nats.
    """
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return -(logp.exp() * logp).sum(-1)  # (B, T)
