"""The policy loss: the clipped surrogate, k3 KL, and the loss aggregations the config's ``loss_type`` names.

Pure tensor functions, tested against hand-computed values (``tests/trainer/test_grpo.py``). The aggregations are
registered in :data:`LOSS_TYPES` with one signature, ``(masked, mask, Normalisers) -> scalar``;
:func:`aggregate_loss` looks one up by name, so a new aggregation is one decorated function.

Shapes: ``B`` completions in a micro-batch, ``T`` completion tokens (right-padded).

Sources:
    * DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), section 4.1: the GRPO objective (eq. 3) and the k3 KL
      estimator (eq. 4).
    * DAPO (Yu et al. 2025, arXiv 2503.14476): decoupled clipping ``epsilon``/``epsilon_high`` ("clip-higher")
      and the token-level loss normalised over all tokens of the batch (eq. 8).
    * Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): a constant length normaliser, which removes GRPO's length bias.
    * GSPO (Zheng et al. 2025, arXiv 2507.18071): the sequence-level ratio, the geometric mean of the token ratios
      (``importance_sampling_level: sequence``), and GSPO-token (``sequence_token``), its value with each token's
      own gradient.
    * CISPO (MiniMax-M1, arXiv 2506.13585): clip the importance weight, detached, not the update.
    * INTELLECT-2 (arXiv 2505.07291): two-sided clipping, the ratio bounded by ``delta`` for negative advantages.
    * SAPO (arXiv 2511.20347): a sigmoid gate of the ratio in place of the hard clip.
    * LUSPO (arXiv 2602.05261): GSPO with each sequence's loss summed over its tokens (length-unbiased).
    * VESPO (arXiv 2602.10693): a Gamma-shaped weight of the sequence ratio, detached, on ``A * log pi``.
    * DeepSeek-V3.2 (arXiv 2512.02556), eq. 9: off-policy sequence masking; section 3.1: the KL term weighed by the
      ratio (``use_bias_correction_kl``).
    * The entropy bonus ``entropy_coeff`` (Williams & Peng 1991; PPO, Schulman et al. 2017, arXiv 1707.06347, eq. 9):
      verl's ``actor.entropy_coeff``, aggregated as verl's ``agg_loss`` aggregates it
      (``tests/integrations/test_algorithms_verl.py``).

    Each is written to equal TRL 1.16's ``GRPOTrainer._compute_loss`` on the same tensors, gradients included
    (``tests/integrations/test_algorithms_trl.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from pydantic import ConfigDict

from trainer.algorithms.registry import Registry

#: Log-ratios (policy vs old policy, reference vs policy) are clamped to +-this many nats before ``exp``. In float32
#: ``exp(x)`` overflows to ``inf`` past about 88.7, and ``inf * 0`` (a masked padding position) is NaN in both the
#: loss and its gradient. ``exp(20)`` is about 5e8: a real token that far from the old policy is clipped anyway.
MAX_LOG_RATIO = 20.0


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float,
    epsilon_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate loss (DeepSeekMath eq. 3; clip-higher from DAPO, section 3.1).

    ``loss_t = -min(rho_t * A, clip(rho_t, 1 - epsilon, 1 + epsilon_high) * A)`` with
    ``rho_t = exp(logp_t - old_logp_t)``. With ``num_iterations == 1`` the caller passes ``old_logp =
    logp.detach()``, so ``rho == 1`` and the gradient is the plain policy gradient. The log-ratio is clamped to
    ``+-MAX_LOG_RATIO`` before ``exp``, so a huge gap at a masked padding position cannot make the loss NaN.

    Args:
        logp: ``(B, T)`` log-probs of the completion tokens under the policy being trained (with grad).
        old_logp: ``(B, T)`` log-probs under the policy that sampled them (no grad).
        advantages: ``(B,)`` one advantage per completion (outcome supervision), or ``(B, T)`` one per token
            (process supervision, :func:`trainer.algorithms.advantages.process_advantages`).
        epsilon: lower clip range, ``rho >= 1 - epsilon``.
        epsilon_high: upper clip range, ``rho <= 1 + epsilon_high``; ``None`` means ``epsilon``.

    Returns:
        ``(per_token_loss, is_clipped)``, both ``(B, T)``; ``is_clipped`` marks tokens whose gradient the clip
        removed (ratio outside the range on the side that the advantage's sign makes binding).
    """
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp((logp - old_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # (B, T)
    adv = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages  # (B, 1) or (B, T)
    unclipped = ratio * adv  # (B, T)
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon_high) * adv  # (B, T)
    per_token_loss = -torch.min(unclipped, clipped)  # (B, T)
    is_clipped = ((ratio < 1.0 - epsilon) & (adv < 0)) | ((ratio > 1.0 + epsilon_high) & (adv > 0))  # (B, T)
    return per_token_loss, is_clipped


ImportanceSamplingLevel = Literal["token", "sequence", "sequence_token"]
#: ``importance_sampling_level`` choices: TRL's ``token`` and ``sequence`` (GSPO), and GSPO-token.
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = ("token", "sequence", "sequence_token")


def log_importance_weights(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str = "token"
) -> torch.Tensor:
    """The log importance ratio at ``importance_sampling_level``, clamped to ``+-MAX_LOG_RATIO``.

    * ``token``: ``log rho_t = logp_t - old_logp_t`` per token, ``(B, T)``.
    * ``sequence`` (GSPO, arXiv 2507.18071, eq. 7): the token mean over the completion's counted tokens,
      ``log s = sum_t m_t (logp_t - old_logp_t) / max(1, sum_t m_t)``, one per completion, ``(B, 1)``; its gradient
      spreads over all tokens as ``1 / |y|``.
    * ``sequence_token`` (GSPO-token, eq. 13): the same value on every token, ``sg[log s] + logp_t - sg[logp_t]``,
      ``(B, T)``: each token's gradient is its own, scaled by the sequence ratio (the two agree when the advantage is
      one per completion).

    Args:
        logp: ``(B, T)`` policy log-probs (with grad).
        old_logp: ``(B, T)`` sampling policy's log-probs (no grad).
        mask: ``(B, T)`` completion tokens that count.
        level: one of :data:`IMPORTANCE_SAMPLING_LEVELS`.

    Raises:
        ValueError: unknown ``level``.
    """
    log_ratio = logp - old_logp  # (B, T)
    if level == "token":
        return log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {level!r}")
    m = mask.to(log_ratio.dtype)
    sequence = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)  # (B, 1)
    sequence = sequence.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    if level == "sequence":
        return sequence
    return sequence.detach() + logp - logp.detach()  # (B, T): value log s, gradient d logp_t


@dataclass(frozen=True, kw_only=True)
class PolicyOptions:
    """The objective's options beyond the clip range, under TRL's names and with TRL's defaults: an option group
    of :class:`trainer.config.GRPOConfig` (which is one), defined beside the math that reads it."""

    #: pydantic reads the docstring under each field (:func:`trainer.config.field_docs`), as for every option group.
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(use_attribute_docstrings=True)

    # ------------------------------------------------------------------ objective
    importance_sampling_level: str = "token"
    """Ratio per ``token``, per ``sequence`` (GSPO: mean log-ratio), or ``sequence_token`` (GSPO-token)."""
    delta: float | None = None
    """INTELLECT-2's two-sided clipping: ``ratio <= delta`` for a negative advantage (``delta > 1 + epsilon_high``)."""
    sapo_temperature_pos: float = 1.0
    """``loss_type: sapo``: the gate's temperature for tokens with a positive advantage."""
    sapo_temperature_neg: float = 1.05
    """``loss_type: sapo``: the gate's temperature for the other tokens."""
    vespo_k_pos: float = 2.0
    """``loss_type: vespo``: Gamma power k for non-negative advantages (down-weights ratios below 1)."""
    vespo_lambda_pos: float = 3.0
    """``loss_type: vespo``: Gamma decay lambda for non-negative advantages (down-weights ratios above 1)."""
    vespo_k_neg: float = 3.0
    """``loss_type: vespo``: Gamma power k for negative advantages."""
    vespo_lambda_neg: float = 2.0
    """``loss_type: vespo``: Gamma decay lambda for negative advantages."""
    off_policy_mask_threshold: float | None = None
    """Drop negative-advantage completions whose mean sampler-vs-policy log-gap exceeds this (DeepSeek-V3.2)."""
    use_bias_correction_kl: bool = False
    """Multiply the KL term by the importance ratio (DeepSeek-V3.2; TRL 1.16's default is true, ours off)."""

    # ------------------------------------------------------------------ entropy and masking
    top_entropy_quantile: float = 1.0
    """Train the policy term on this top share of tokens by entropy only (arXiv 2506.01939, TRL semantics; 1: all)."""
    kl_cov_ratio: float = 0.0002
    """``loss_type: kl_cov``: share of tokens, by covariance of advantage and log-prob, given the KL penalty (verl)."""
    ppo_kl_coef: float = 0.1
    """``loss_type: kl_cov``: the coefficient of that penalty, ``|log ratio|`` (verl's name and default)."""
    clip_cov_ratio: float = 0.0002
    """``loss_type: clip_cov``: share of tokens whose gradient is cut (verl's name and default)."""
    clip_cov_lb: float = 1.0
    """``loss_type: clip_cov``: a cut token's covariance is above this (verl's default)."""
    clip_cov_ub: float = 5.0
    """``loss_type: clip_cov``: ... and below this (verl's default)."""
    mask_zero_advantage_groups: bool = False
    """Leave groups whose advantages are all 0 out of the loss, KL included (off: with ``beta > 0`` they draw KL)."""
    entropy_coeff: float = 0.0
    """Entropy bonus: the loss minus this times the entropy, aggregated as ``loss_type`` (verl's name; 0: off)."""


@dataclass(frozen=True)
class SurrogateInputs:
    """What a policy term reads; shapes ``(B, T)`` unless said.

    Attributes:
        logp: policy log-probs (with grad).
        log_ratio: ``logp - old_logp`` per token, clamped (VESPO sums it into a sequence ratio).
        log_weights: the log ratio at ``importance_sampling_level``, ``(B, T)`` or ``(B, 1)``.
        advantages: ``(B, 1)`` or ``(B, T)``.
        mask: the tokens that count.
        epsilon, epsilon_high: the clip range (CISPO: ``epsilon_high`` is the cap of the weight itself).
        options: the rest.
        importance_weights: the sampler correction (VESPO folds it into its weight), or ``None``.
    """

    logp: torch.Tensor
    log_ratio: torch.Tensor
    log_weights: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    epsilon: float
    epsilon_high: float
    options: PolicyOptions
    importance_weights: torch.Tensor | None


@dataclass(frozen=True)
class PolicyTerm:
    """A registered per-token policy loss.

    Attributes:
        compute: ``SurrogateInputs -> (per_token_loss, is_clipped)``, each broadcastable to ``(B, T)``.
        folds_importance_weights: it applies the sampler correction itself (VESPO), so the loss does not multiply by
            it again.
    """

    compute: Callable[[SurrogateInputs], tuple[torch.Tensor, torch.Tensor]]
    folds_importance_weights: bool = False


#: The ``loss_type`` entries with a policy term of their own; every other ``loss_type`` uses :func:`clipped_term`.
POLICY_TERMS: Registry[PolicyTerm] = Registry("loss_type")


def clipped_term(x: SurrogateInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate on the ratio at ``importance_sampling_level`` (GSPO's eq. 5 at ``sequence``), with
    two-sided clipping: ``-min(min(rho, delta) * A, clip(rho, 1 - epsilon, 1 + epsilon_high) * A)``."""
    ratio = torch.exp(x.log_weights)
    clipped = torch.clamp(ratio, 1.0 - x.epsilon, 1.0 + x.epsilon_high)
    if x.options.delta is not None:
        ratio = torch.clamp(ratio, max=x.options.delta)
    per_token = -torch.min(ratio * x.advantages, clipped * x.advantages)
    is_clipped = ((ratio < 1.0 - x.epsilon) & (x.advantages < 0)) | (
        (ratio > 1.0 + x.epsilon_high) & (x.advantages > 0)
    )
    return per_token, is_clipped


def _cispo(x: SurrogateInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1 eq. 4): ``-sg[min(rho, epsilon_high)] * A * logp``; ``epsilon_high`` caps the weight."""
    ratio = torch.exp(x.log_weights)
    weight = torch.clamp(ratio, max=x.epsilon_high).detach()
    return -weight * x.advantages * x.logp, (ratio > x.epsilon_high) & (x.advantages > 0)


def _sapo(x: SurrogateInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """SAPO: ``-sigmoid(tau * (rho - 1)) * 4 / tau * A`` with ``tau`` by the advantage's sign (> 0 or not)."""
    o = x.options
    tau = torch.where(
        x.advantages > 0,
        torch.tensor(o.sapo_temperature_pos, dtype=x.advantages.dtype),
        torch.tensor(o.sapo_temperature_neg, dtype=x.advantages.dtype),
    )
    gate = torch.sigmoid(tau * (torch.exp(x.log_weights) - 1.0)) * 4.0 / tau
    return -gate * x.advantages, torch.zeros_like(x.advantages, dtype=torch.bool)


#: VESPO's bounds of the log sequence weight: ``log(1e-8)`` below, ``MAX_LOG_RATIO`` above.
VESPO_MIN_LOG_WEIGHT = math.log(1e-8)


def vespo_weights(x: SurrogateInputs) -> torch.Tensor:
    """VESPO's detached sequence weight ``phi(w) = exp(lambda + k log w - lambda w)`` (``phi(1) = 1``), with
    ``log w = sum_t m_t log rho_t`` (plus the sampler correction's log-weights on every position), bounded to
    ``[log 1e-8, 20]``, and ``(k, lambda)`` by the advantage's sign (``>= 0`` or not); ``(B, 1)`` (or ``(B, T)`` for
    per-token advantages)."""
    o = x.options
    with torch.no_grad():
        log_w = (x.log_ratio * x.mask.to(x.log_ratio.dtype)).sum(-1, keepdim=True)  # (B, 1)
        if x.importance_weights is not None:
            log_is = torch.log(x.importance_weights).clamp(VESPO_MIN_LOG_WEIGHT, MAX_LOG_RATIO)
            log_w = log_w + log_is.sum(-1, keepdim=True)
        log_w = log_w.clamp(VESPO_MIN_LOG_WEIGHT, MAX_LOG_RATIO)
        non_negative = x.advantages >= 0
        k = torch.where(non_negative, o.vespo_k_pos, o.vespo_k_neg).to(log_w.dtype)
        lam = torch.where(non_negative, o.vespo_lambda_pos, o.vespo_lambda_neg).to(log_w.dtype).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def _vespo(x: SurrogateInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """VESPO: ``-phi(w) * A * logp`` (:func:`vespo_weights`)."""
    return -vespo_weights(x) * x.advantages * x.logp, torch.zeros_like(x.advantages, dtype=torch.bool)


POLICY_TERMS.register("cispo")(PolicyTerm(_cispo))
POLICY_TERMS.register("sapo")(PolicyTerm(_sapo))
POLICY_TERMS.register("vespo")(PolicyTerm(_vespo, folds_importance_weights=True))


def off_policy_mask(
    advantages: torch.Tensor, logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, threshold: float
) -> torch.Tensor:
    """Off-policy sequence masking (DeepSeek-V3.2 eq. 9): 1 where the advantage is ``>= 0`` or the completion's mean
    ``log pi_sampler - log pi`` over its counted tokens is at most ``threshold``, else 0 (a NaN gap counts as 0).

    Returns:
        ``(B, 1)`` (or ``(B, T)`` for per-token advantages), in ``mask``'s dtype; detached.
    """
    m = mask.to(logp.dtype)
    gap = torch.nan_to_num(sampling_logp - logp.detach(), nan=0.0)  # (B, T)
    mean_gap = (gap * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)  # (B, 1)
    return ((advantages >= 0) | (mean_gap <= threshold)).to(m.dtype)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference) (DeepSeekMath eq. 4; Schulman 2020, "Approximating KL").

    ``kl_t = exp(ref_logp_t - logp_t) - (ref_logp_t - logp_t) - 1``: unbiased, always >= 0, and exactly 0 where
    the two log-probs agree. The gap is clamped to ``+-MAX_LOG_RATIO`` first (see :func:`clipped_surrogate`).

    Args:
        logp: ``(B, T)`` policy log-probs of the sampled tokens.
        ref_logp: ``(B, T)`` frozen reference model's log-probs of the same tokens.

    Returns:
        ``(B, T)``.
    """
    delta = (ref_logp - logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # (B, T)
    return torch.exp(delta) - delta - 1.0  # (B, T)


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    *,
    max_completion_length: int,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    num_completions_in_batch: int | float | torch.Tensor | None = None,
    gradient_accumulation_steps: int = 1,
    num_items_in_micro_batch: int | float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce per-token losses of one micro-batch to the scalar that is back-propagated.

    Summing the returned values over the ``gradient_accumulation_steps`` micro-batches of a batch gives the
    batch loss (exactly for ``grpo``, ``dr_grpo`` and ``dapo``; ``bnpo`` normalises per micro-batch by design).

    * ``grpo``: mean over completions of each completion's token mean (DeepSeekMath eq. 3). Long completions
      weigh less per token, which Dr. GRPO (arXiv 2503.20783, section 3.1) shows biases length.
    * ``bnpo``: sum over the micro-batch's tokens divided by their number.
    * ``dr_grpo``: sum divided by ``completions * max_completion_length``, a constant (Dr. GRPO, section 3.2).
    * ``dapo``: sum divided by the number of completion tokens in the whole accumulated batch,
      ``num_items_in_batch`` (DAPO eq. 8, token-level policy gradient loss).

    A completion whose mask is all 0 (a null reward, a masked truncated completion) is not trained on: it adds
    nothing to any sum, and it does not count in the ``grpo`` and ``dr_grpo`` denominators when the caller passes
    ``num_completions_in_batch``, the completions of the whole batch that have a token in the mask.

    Args:
        per_token_loss: ``(B, T)``.
        mask: ``(B, T)`` 1 for completion tokens that count, 0 for padding (and for completions not trained on).
        loss_type: ``grpo``, ``bnpo``, ``dr_grpo`` or ``dapo``.
        max_completion_length: in tokens; the ``dr_grpo`` constant.
        num_items_in_batch: completion tokens in the accumulated batch; required for ``dapo``.
        num_completions_in_batch: completions that count in the accumulated batch (``grpo``, ``dr_grpo``);
            ``None`` counts every row, ``B * gradient_accumulation_steps``. With several processes the loop
            passes the count over all ranks divided by their number, since the ranks' gradients are averaged
            (likewise ``num_items_in_batch`` for ``dapo`` and ``num_items_in_micro_batch`` for ``bnpo``).
        gradient_accumulation_steps: micro-batches per optimizer step; ``bnpo`` divides by it so the accumulated
            gradient is the mean over micro-batches.
        num_items_in_micro_batch: ``bnpo``'s normaliser; ``None`` counts the tokens in ``mask``.

    Raises:
        ValueError: unknown ``loss_type``, or ``dapo`` without ``num_items_in_batch``.
    """
    mask = mask.to(per_token_loss.dtype)  # (B, T)
    masked = per_token_loss * mask  # (B, T)
    if num_completions_in_batch is None:
        num_completions_in_batch = per_token_loss.size(0) * gradient_accumulation_steps
    aggregation = LOSS_TYPES.get(loss_type)
    normalisers = Normalisers(
        completions=torch.as_tensor(num_completions_in_batch, dtype=per_token_loss.dtype).clamp(min=1.0),
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_items_in_micro_batch=num_items_in_micro_batch,
    )
    return aggregation(masked, mask, normalisers)


# ---------------------------------------------------------------------------------------------------- aggregations


@dataclass(frozen=True)
class Normalisers:
    """What an aggregation may divide by; :func:`aggregate_loss` says what each one is.

    Attributes:
        completions: scalar, the completions that count in the accumulated batch (at least 1).
        max_completion_length: in tokens.
        num_items_in_batch: completion tokens in the accumulated batch, or ``None``.
        gradient_accumulation_steps: micro-batches per optimizer step.
        num_items_in_micro_batch: tokens that count in this micro-batch, or ``None`` (count ``mask``).
    """

    completions: torch.Tensor
    max_completion_length: int
    num_items_in_batch: int | float | torch.Tensor | None
    gradient_accumulation_steps: int
    num_items_in_micro_batch: int | float | torch.Tensor | None


#: ``(masked, mask, normalisers) -> scalar``: ``masked`` is ``(B, T)`` per-token losses already times ``mask``.
Aggregation = Callable[[torch.Tensor, torch.Tensor, Normalisers], torch.Tensor]

#: The ``loss_type`` choices, in the order the config's error lists them.
LOSS_TYPES: Registry[Aggregation] = Registry("loss_type")


@LOSS_TYPES.register("grpo")
def grpo(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """Mean over completions of each completion's token mean (DeepSeekMath eq. 3)."""
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / n.completions


@LOSS_TYPES.register("bnpo")
def bnpo(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """Sum over the micro-batch's tokens divided by their number (and by the micro-batches of the step)."""
    count = mask.sum() if n.num_items_in_micro_batch is None else n.num_items_in_micro_batch
    count = torch.as_tensor(count, dtype=masked.dtype).clamp(min=1.0)
    return masked.sum() / count / n.gradient_accumulation_steps


@LOSS_TYPES.register("dr_grpo")
def dr_grpo(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """Sum divided by ``completions * max_completion_length``, a constant (Dr. GRPO, section 3.2)."""
    return masked.sum() / (n.completions * n.max_completion_length)


@LOSS_TYPES.register("dapo")
def dapo(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """Sum divided by the completion tokens of the whole accumulated batch (DAPO eq. 8).

    Raises:
        ValueError: ``num_items_in_batch`` is ``None``.
    """
    if n.num_items_in_batch is None:
        raise ValueError("loss_type 'dapo' needs num_items_in_batch, the completion tokens of the whole batch")
    normaliser = torch.as_tensor(n.num_items_in_batch, dtype=masked.dtype).clamp(min=1.0)
    return masked.sum() / normaliser


# The objectives of issue 22 aggregate as TRL 1.16 does for them: CISPO and VESPO as DAPO, SAPO as GRPO.
LOSS_TYPES.register("cispo")(dapo)
LOSS_TYPES.register("sapo")(grpo)


@LOSS_TYPES.register("luspo")
def luspo(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
    """Each completion's loss summed over its tokens, averaged over completions (LUSPO: length-unbiased GSPO)."""
    return masked.sum() / n.completions


LOSS_TYPES.register("vespo")(dapo)


# -------------------------------------------------------------------------------------------------------- the loss


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty). Both ``(B, T)``; returns a scalar."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


@dataclass(frozen=True)
class LossOutput:
    """What :func:`grpo_loss` returns: the scalar to back-propagate and detached per-micro-batch statistics.

    Attributes:
        loss: scalar with grad, already divided for gradient accumulation as :func:`aggregate_loss` says.
        policy_loss: the surrogate part of ``loss`` alone (detached).
        kl: token mean of the k3 KL (detached); 0 when ``beta == 0``.
        clip_ratio: share of completion tokens whose gradient the clip removed (detached).
    """

    loss: torch.Tensor
    policy_loss: torch.Tensor
    kl: torch.Tensor
    clip_ratio: torch.Tensor


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str,
    epsilon: float,
    epsilon_high: float | None,
    beta: float,
    ref_logp: torch.Tensor | None,
    max_completion_length: int,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    num_completions_in_batch: int | float | torch.Tensor | None = None,
    gradient_accumulation_steps: int = 1,
    importance_weights: torch.Tensor | None = None,
    num_items_in_micro_batch: int | float | torch.Tensor | None = None,
    options: PolicyOptions | None = None,
    sampling_logp: torch.Tensor | None = None,
    token_mask: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> LossOutput:
    """The GRPO objective of one micro-batch (DeepSeekMath eq. 3): clipped surrogate plus ``beta`` times k3 KL.

    The KL term is added per token, inside the aggregation, as in eq. 3, so a token outside ``mask`` gets neither
    policy nor KL gradient. With ``beta == 0`` no reference log-probs are needed and ``ref_logp`` may be ``None``.

    Args:
        logp: ``(B, T)`` policy log-probs (with grad).
        old_logp: ``(B, T)`` sampling policy's log-probs (no grad).
        advantages: ``(B,)`` per completion, or ``(B, T)`` per token.
        mask: ``(B, T)`` completion tokens that count.
        loss_type, max_completion_length, num_items_in_batch, num_completions_in_batch,
            gradient_accumulation_steps, num_items_in_micro_batch: see :func:`aggregate_loss`.
        epsilon, epsilon_high: see :func:`clipped_surrogate`.
        beta: KL coefficient.
        ref_logp: ``(B, T)`` reference log-probs, required when ``beta > 0``.
        importance_weights: ``(B, T)`` or ``(B, 1)`` sampler correction from
            :func:`trainer.rollout.correction.sampler_importance_weights`;
            it multiplies the surrogate of each token, not the KL term (as TRL applies it).
        options: the importance-sampling level, two-sided clipping, the SAPO/VESPO parameters, off-policy masking
            and the KL's bias correction (:class:`PolicyOptions`; ``None``: TRL's defaults, all off).
        sampling_logp: ``(B, T)`` the sampler's log-probs, for off-policy masking (``None``: ``old_logp``).
        token_mask: ``(B, T)`` bool, the tokens the policy term trains on (``top_entropy_quantile``'s
            :func:`trainer.algorithms.entropy.high_entropy_mask`); the KL term and the denominators keep ``mask``, as
            in TRL. ``None``: every token of ``mask``.
        entropy: ``(B, T)`` per-token entropy of the policy, nats, with grad, for the entropy bonus; required when
            ``options.entropy_coeff != 0``. The bonus is ``-entropy_coeff * agg(entropy)``, aggregated as the loss
            (verl's ``policy_loss - entropy_coeff * agg_loss(entropy, response_mask, loss_agg_mode)``) over the
            tokens the policy term trains on (``token_mask``, as TRL's bonus), with the loss's denominators; neither
            the sampler correction nor the off-policy mask weighs it.

    The per-token policy term is the ``loss_type``'s entry of :data:`POLICY_TERMS` (CISPO, SAPO, VESPO), else the
    clipped surrogate (:func:`clipped_term`), on the ratio at ``importance_sampling_level``; then, in TRL 1.16's
    order: off-policy mask, entropy mask (``token_mask``), sampler correction, ``+ beta * KL``, the aggregation.

    Raises:
        ValueError: ``beta > 0`` without ``ref_logp``, ``entropy_coeff != 0`` without ``entropy``, or what
            :func:`aggregate_loss` raises.
    """
    options = options or PolicyOptions()
    if options.entropy_coeff != 0.0 and entropy is None:
        raise ValueError("entropy_coeff != 0 needs entropy, the policy's per-token entropy with grad")
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages  # (B, 1) or (B, T)
    log_ratio = (logp - old_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # (B, T)
    log_weights = log_importance_weights(logp, old_logp, mask, options.importance_sampling_level)
    term = POLICY_TERMS.get(loss_type) if loss_type in POLICY_TERMS else PolicyTerm(clipped_term)
    x = SurrogateInputs(logp, log_ratio, log_weights, adv, mask, epsilon, epsilon_high, options, importance_weights)
    per_token, is_clipped = term.compute(x)
    per_token, is_clipped = per_token.expand(mask.shape), is_clipped.expand(mask.shape)  # (B, T)
    if options.off_policy_mask_threshold is not None:
        sampled = old_logp if sampling_logp is None else sampling_logp
        per_token = per_token * off_policy_mask(adv, logp, sampled, mask, options.off_policy_mask_threshold)
    if token_mask is not None:
        per_token = per_token * token_mask.to(per_token.dtype)  # (B, T)
    if importance_weights is not None and not term.folds_importance_weights:
        per_token = per_token * importance_weights  # (B, T)
    agg = functools.partial(
        aggregate_loss,
        loss_type=loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
        num_completions_in_batch=num_completions_in_batch,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_items_in_micro_batch=num_items_in_micro_batch,
    )
    policy_part = agg(per_token, mask)
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp, the reference model's log-probs")
        kl = kl_k3(logp, ref_logp)  # (B, T)
        if options.use_bias_correction_kl:
            kl = kl * torch.exp(log_weights)  # the ratio's gradient too, even where it is 1
        loss = agg(per_token + beta * kl, mask)
        kl_mean = masked_mean(kl.detach(), mask)
    else:
        loss = policy_part
        kl_mean = torch.zeros(())
    if options.entropy_coeff != 0.0:
        assert entropy is not None
        bonus = entropy.to(per_token.dtype)  # (B, T)
        if token_mask is not None:
            bonus = bonus * token_mask.to(bonus.dtype)
        loss = loss - options.entropy_coeff * agg(bonus, mask)
    return LossOutput(
        loss=loss,
        policy_loss=policy_part.detach(),
        kl=kl_mean,
        clip_ratio=masked_mean(is_clipped.to(per_token.dtype), mask),
    )
