"""Entropy control: train only on the highest-entropy tokens (``top_entropy_quantile``).

Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for LLM
Reasoning" (arXiv 2506.01939): restricting the policy gradient to the top 20% of tokens by entropy ("forking
tokens") matches or beats training on all of them. The option and its semantics are TRL 1.16's
(``GRPOConfig.top_entropy_quantile``, ``GRPOTrainer.get_high_entropy_mask``): the threshold is the
``1 - top_entropy_quantile`` quantile of the entropies of every counted completion token of the micro-batch, over all
ranks; a token is trained on when its entropy is at least the threshold. The KL term and the loss's denominators
keep every counted token, as in TRL.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: Entropies are >= 0, so this pad value can never be a real one (it marks another rank's padding).
_PAD = -1e9


def high_entropy_mask(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    top_entropy_quantile: float,
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """The tokens whose entropy is in the top ``top_entropy_quantile`` share of the counted tokens.

    Args:
        entropy: ``(B, T)`` per-token entropy of the policy's (temperature-scaled) distribution, nats.
        mask: ``(B, T)`` tokens that count (1) and padding or masked tokens (0).
        top_entropy_quantile: share of tokens to keep, in ``[0, 1]``; 1.0 keeps every counted token, 0.0 only those
            at the maximum entropy (TRL's semantics, ``torch.quantile``'s linear interpolation).
        gather: concatenates a 1-D tensor over ranks (each rank's may differ in length); ``None``: one process.

    Returns:
        ``(B, T)`` bool: counted tokens with ``entropy >= threshold``; all False when no token counts anywhere.

    Raises:
        ValueError: ``top_entropy_quantile`` outside ``[0, 1]``.
    """
    if not 0.0 <= top_entropy_quantile <= 1.0:
        raise ValueError(f"top_entropy_quantile must be in [0, 1], got {top_entropy_quantile}")
    counted = mask.bool()
    local = entropy[counted].float()  # (M,)
    values = gather(local) if gather is not None else local
    values = values[values != _PAD]
    if values.numel() == 0:
        return torch.zeros_like(counted)
    threshold = torch.quantile(values, 1.0 - top_entropy_quantile)
    return ((entropy * mask.to(entropy.dtype)) >= threshold) & counted


def pad_for_gather(local: torch.Tensor, length: int) -> torch.Tensor:
    """``local`` (1-D) padded to ``length`` with a value no entropy can take, so ranks' tensors can be all-gathered
    at one shape and the padding dropped after (:func:`high_entropy_mask` drops it)."""
    return torch.cat([local, local.new_full((length - local.numel(),), _PAD)])
