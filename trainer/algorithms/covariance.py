"""KL-Cov and Clip-Cov (Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
arXiv 2505.22617, section 5): entropy collapse is driven by tokens whose log-probability and advantage covary
strongly, so a small share of the highest-covariance tokens gets a KL penalty (KL-Cov) or no gradient (Clip-Cov).

Registered as ``loss_type`` entries of :data:`trainer.algorithms.losses.POLICY_TERMS`, aggregated as ``dapo``
(verl's ``token-mean``), with verl's option names and defaults (``kl_cov_ratio``, ``ppo_kl_coef``,
``clip_cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub``; :class:`~trainer.algorithms.losses.PolicyOptions`). Both
equal verl's ``compute_policy_loss_kl_cov`` / ``compute_policy_loss_clip_cov`` on the same tensors (Clip-Cov under
the same torch seed: it picks its tokens at random), tested in ``tests/integrations/test_algorithms_verl.py``. The
covariance is over the micro-batch's counted tokens, as in verl.
"""

from __future__ import annotations

import torch

from trainer.algorithms.losses import LOSS_TYPES, POLICY_TERMS, PolicyTerm, SurrogateInputs, clipped_term, dapo


def token_covariance(advantages: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each counted token's contribution to ``Cov(A, log pi)``: ``(A_t - mean A) * (log pi_t - mean log pi)``, the
    means over the counted tokens; ``(B, T)``, detached, ``-inf`` where ``mask`` is 0."""
    valid = mask > 0
    a, lp = advantages.detach().expand_as(logp), logp.detach()
    count = valid.sum().clamp(min=1)
    cov = (a - a[valid].sum() / count) * (lp - lp[valid].sum() / count)
    return cov.masked_fill(~valid, -torch.inf)


def _kl_cov(x: SurrogateInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """KL-Cov (arXiv 2505.22617, eq. 10): the unclipped surrogate ``-A * rho``, plus ``ppo_kl_coef * |log rho|`` on
    the top ``kl_cov_ratio`` share of counted tokens by covariance (at least one)."""
    o = x.options
    advantages = x.advantages.expand_as(x.logp)
    per_token = -advantages * torch.exp(x.log_ratio)  # (B, T)
    valid = x.mask > 0
    n_valid = int(valid.sum())
    selected = torch.zeros_like(valid)
    if n_valid:
        cov = token_covariance(advantages, x.logp, x.mask)[valid]  # (M,)
        top = torch.topk(cov, max(1, int(n_valid * o.kl_cov_ratio))).indices
        selected.view(-1)[torch.nonzero(valid.view(-1), as_tuple=True)[0][top]] = True
    per_token = torch.where(selected, per_token + o.ppo_kl_coef * x.log_ratio.abs(), per_token)
    return per_token, selected


def _clip_cov(x: SurrogateInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-Cov (arXiv 2505.22617, eq. 9): PPO's clipped surrogate, with the gradient of ``clip_cov_ratio`` of the
    counted tokens (at least one) set to 0, drawn at random from those the clip left alone whose covariance lies in
    ``(clip_cov_lb, clip_cov_ub)``."""
    o = x.options
    per_token, is_clipped = clipped_term(x)
    per_token = per_token.expand_as(x.logp)
    valid = x.mask > 0
    clipped_by_ratio = (-x.advantages * torch.clamp(torch.exp(x.log_ratio), 1 - x.epsilon, 1 + x.epsilon_high)) > (
        -x.advantages * torch.exp(x.log_ratio)
    )
    cov = token_covariance(x.advantages, x.logp, x.mask).masked_fill(clipped_by_ratio & valid, -torch.inf)
    candidates = torch.nonzero((cov < o.clip_cov_ub) & (cov > o.clip_cov_lb) & valid)  # (K, 2)
    keep = torch.ones_like(per_token)
    if len(candidates):
        n = max(int(o.clip_cov_ratio * int(valid.sum())), 1)
        chosen = candidates[torch.randperm(len(candidates))[:n]]
        keep[chosen[:, 0], chosen[:, 1]] = 0
    return per_token * keep, is_clipped.expand_as(keep) | (keep == 0)


POLICY_TERMS.register("kl_cov")(PolicyTerm(_kl_cov))
POLICY_TERMS.register("clip_cov")(PolicyTerm(_clip_cov))
LOSS_TYPES.register("kl_cov")(dapo)
LOSS_TYPES.register("clip_cov")(dapo)
