"""The sampler correction: importance weights between a sampler that is not the policy's own forward (vLLM) and
the trainer's forward, and the per-step record of their mismatch.

The sampler and the trainer compute slightly different probabilities for the same weights, so rollouts come
from ``pi_sampler``, not ``pi_old``; :class:`SamplerCorrection` measures the gap on each micro-batch and, when
``vllm_importance_sampling_correction`` is on, weighs each token's surrogate by the truncated ratio
(:func:`sampler_importance_weights`). Only backends that return ``RolloutBatch.sampling_log_probs`` need it.

Sources:
    * Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (fengyao.notion.site,
      Aug 2025): truncated importance sampling (TIS) between the inference engine's sampler and the trainer, with
      TRL's modes (``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from trainer.config import GRPOConfig
    from trainer.rollout.base import RolloutBatch

ImportanceSamplingMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
IMPORTANCE_SAMPLING_MODES: tuple[str, ...] = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def sampler_importance_weights(
    old_logp: torch.Tensor,
    sampling_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: ImportanceSamplingMode,
    cap: float,
) -> torch.Tensor:
    """Importance weights that correct for sampling with another engine than the trainer's forward (TIS/MIS).

    The sampler (vLLM) and the trainer compute slightly different probabilities for the same weights, so the
    rollouts come from ``pi_sampler``, not ``pi_old``. Each token's surrogate is multiplied by
    ``w = pi_old / pi_sampler`` (Yao et al. 2025), bounded by ``cap`` as TRL's ``vllm_importance_sampling_mode``
    says:

    * ``token_truncate``: ``w_t = min(exp(old_t - sampling_t), cap)`` per token.
    * ``token_mask``: ``w_t = exp(old_t - sampling_t)``, or 0 where it exceeds ``cap``.
    * ``sequence_truncate``: one ``w = min(exp(sum_t (old_t - sampling_t)), cap)`` per completion.
    * ``sequence_mask``: the same sequence ratio, or 0 where it exceeds ``cap``.

    Args:
        old_logp: ``(B, T)`` log-probs of the sampled tokens under the policy that sampled (no grad).
        sampling_logp: ``(B, T)`` the sampler's log-probs of the same tokens.
        mask: ``(B, T)`` completion tokens (padding contributes ratio 1 and is masked by the loss anyway).
        mode: one of :data:`IMPORTANCE_SAMPLING_MODES`.
        cap: the upper bound ``C`` (> 0).

    Returns:
        ``(B, T)`` for ``token_*`` modes, ``(B, 1)`` for ``sequence_*`` modes (broadcasts over tokens); detached.

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in IMPORTANCE_SAMPLING_MODES:
        raise ValueError(f"mode must be one of {IMPORTANCE_SAMPLING_MODES}, got {mode!r}")
    log_ratio = (old_logp - sampling_logp).detach() * mask  # (B, T)
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True)  # (B, 1)
    ratio = torch.exp(log_ratio)
    if mode.endswith("truncate"):
        return ratio.clamp(max=cap)
    return ratio.masked_fill(ratio > cap, 0.0)


@dataclass
class SamplerCorrection:
    """The train/inference mismatch of a sampler that is not the policy's own forward (vLLM), per micro-batch.

    ``weights[k]`` is micro-batch ``k``'s truncated importance weight (:func:`sampler_importance_weights`)
    when ``vllm_importance_sampling_correction`` is on. The metrics follow TRL's ``sampling/*`` ones:
    ``rollout/logprob_diff`` (mean ``|log pi_old - log pi_sampler|`` over completion tokens) and ``_max``, and the
    correction's ``rollout/is_ratio_{mean,min,max}`` with ``rollout/is_ratio_capped_frac`` (share of tokens, or of
    completions in ``sequence_*`` modes, whose ratio the cap truncated or masked).
    """

    weights: dict[int, torch.Tensor] = field(default_factory=dict)
    diff_sum: float = 0.0
    diff_max: float = 0.0
    tokens: float = 0.0
    ratios: list[torch.Tensor] = field(default_factory=list)
    capped: list[torch.Tensor] = field(default_factory=list)

    def add(self, k: int, old_logp: torch.Tensor, mb: RolloutBatch, config: GRPOConfig) -> None:
        """Record micro-batch ``k``: ``old_logp`` ``(b, c)`` against ``mb.sampling_log_probs``."""
        assert mb.sampling_log_probs is not None
        mask = mb.model_token_mask.to(old_logp.dtype)  # (b, c); tool output was not sampled
        sampled = mb.sampling_log_probs.to(old_logp.dtype)  # (b, c)
        diff = (old_logp - sampled).abs() * mask
        self.diff_sum += float(diff.sum())
        self.diff_max = max(self.diff_max, float(diff.max()) if diff.numel() else 0.0)
        self.tokens += float(mask.sum())
        if not config.vllm_importance_sampling_correction:
            return
        mode, cap = config.vllm_importance_sampling_mode, config.vllm_importance_sampling_cap
        w = sampler_importance_weights(old_logp, sampled, mask, mode=mode, cap=cap)  # (b, c) or (b, 1)
        self.weights[k] = w
        raw = sampler_importance_weights(old_logp, sampled, mask, mode=mode, cap=math.inf)
        kept = mask.bool() if w.shape[-1] != 1 else mask.sum(-1, keepdim=True) > 0  # tokens, or whole completions
        self.ratios.append(w[kept])
        self.capped.append(raw[kept] > cap)

    def metrics(self) -> dict[str, float]:
        """The step's ``rollout/*`` metrics; empty when the sampler gave no log-probs."""
        if not self.tokens:
            return {}
        out = {"rollout/logprob_diff": self.diff_sum / self.tokens, "rollout/logprob_diff_max": self.diff_max}
        if self.ratios and (ratios := torch.cat(self.ratios)).numel():
            out |= {
                "rollout/is_ratio_mean": float(ratios.mean()),
                "rollout/is_ratio_min": float(ratios.min()),
                "rollout/is_ratio_max": float(ratios.max()),
                "rollout/is_ratio_capped_frac": float(torch.cat(self.capped).float().mean()),
            }
        return out
