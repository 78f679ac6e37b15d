"""GRPO's math as pure tensor functions: group advantages, the clipped surrogate, k3 KL and loss aggregation.

Nothing here knows about models, HTTP or the training loop; every function takes and returns tensors, so each
one is tested against hand-computed values and a slow reference loop (``tests/trainer/test_grpo.py``).

Shapes: ``N`` completions in a batch (``prompt_batch_size * num_generations``), ``B`` completions in a
micro-batch, ``T`` completion tokens (right-padded), ``V`` vocabulary size.

Sources:
    * DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), section 4.1: the GRPO objective (eq. 3), the group
      advantage ``(r - mean(r)) / std(r)`` and the k3 KL estimator (eq. 4).
    * DAPO (Yu et al. 2025, arXiv 2503.14476): decoupled clipping ``epsilon``/``epsilon_high`` ("clip-higher")
      and the token-level loss normalised over all tokens of the batch (eq. 8).
    * Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): no division by the group std and a constant length
      normaliser, which remove GRPO's difficulty and length biases.
    * Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (fengyao.notion.site,
      Aug 2025): truncated importance sampling (TIS) between the inference engine's sampler and the trainer, with
      TRL's modes (``token_truncate``, ``token_mask``, ``sequence_truncate``, ``sequence_mask``).
    * DeepSeekMath section 4.1.3: process supervision, where each reasoning step has a reward and a token's
      advantage is the sum of the normalised rewards of the steps that end at or after it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]

ImportanceSamplingMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
IMPORTANCE_SAMPLING_MODES: tuple[str, ...] = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
#: ``advantage_estimator`` choices: GRPO's group baseline, process supervision, online RFT.
ADVANTAGE_ESTIMATORS: tuple[str, ...] = ("outcome", "process", "rft")

#: A group's rewards "differ" only when their std exceeds this share of the group's reward scale (``max(1, max
#: |r|)``). Equal shaped rewards that were summed in another order (``0.1 + 0.25`` against ``0.35`` in float32) leave
#: a std of rounding residue (about 1e-8 at scale 1); a fixed 1e-8 threshold read it as spread, and divided by a
#: tiny std such a group gets advantages of thousands. Float32 keeps about 7 digits, so 1e-6 of the scale is above
#: any residue and below any real difference of rewards written with fewer than 6 significant digits.
ZERO_SPREAD_RTOL = 1e-6

#: Added to the std before dividing, so a group whose rewards are all equal gives advantage 0, not NaN.
#: TRL uses the same value, which keeps advantages comparable across the two trainers.
ADVANTAGE_EPS = 1e-4

#: Log-ratios (policy vs old policy, reference vs policy) are clamped to +-this many nats before ``exp``. In float32
#: ``exp(x)`` overflows to ``inf`` past about 88.7, and ``inf * 0`` (a masked padding position) is NaN in both the
#: loss and its gradient. ``exp(20)`` is about 5e8: a real token that far from the old policy is clipped anyway.
MAX_LOG_RATIO = 20.0

#: The log-prob given to a token that top-k/top-p sampling could not have drawn (see :func:`token_log_probs`).
OUTSIDE_SUPPORT_LOGP = -1e4


def rft_advantages(verified: torch.Tensor) -> torch.Tensor:
    """Online rejection-sampling fine-tuning's gradient coefficient (DeepSeekMath, section 5.2.1 and appendix A.1.3):
    1 for a verified completion, 0 for any other, with no baseline and no scaling. The policy-gradient loss then
    raises the likelihood of the verified completions only, as SFT on them would, but on samples of the current
    policy.

    Args:
        verified: ``(N,)`` float, 1.0 for a verified completion, 0.0 for a wrong one, NaN where not scoreable.

    Returns:
        ``(N,)`` float32 advantages: ``[1, 0, nan]`` gives ``[1, 0, 0]`` (a null is not trained on).
    """
    return torch.where(torch.isnan(verified), torch.zeros_like(verified), verified).to(torch.float32)


def shuffle_rewards(rewards: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The random-reward control (Shao et al. 2025, "Spurious Rewards", arXiv 2506.10947): the batch's scoreable
    rewards permuted across the whole batch, so that a completion's reward says nothing about the completion while
    the batch keeps the same rewards (the same mean, spread and share of zero-spread groups on average).

    Args:
        rewards: ``(N,)`` rewards, NaN where not scoreable (a NaN stays where it is).
        generator: the permutation's source (seeded by the caller, so that a run is reproducible).

    Returns:
        ``(N,)`` the same multiset of rewards, with the scoreable ones in permuted places.
    """
    out = rewards.clone()
    valid = torch.nonzero(~torch.isnan(rewards)).flatten()  # (M,)
    out[valid] = rewards[valid[torch.randperm(valid.numel(), generator=generator)]]
    return out


@dataclass(frozen=True)
class GroupStats:
    """Per-completion statistics of each completion's group, null rewards left out.

    Attributes:
        mean: ``(N,)`` mean reward of the completion's group over its scoreable members (0 where none are).
        std: ``(N,)`` unbiased std of the same rewards (0 where fewer than two are scoreable).
        group_index: ``(N,)`` the group of each completion as ``0..K-1`` (order of first appearance is not kept).
        num_groups: ``K``.
        spread: ``(N,)`` bool, whether the group's rewards differ by more than rounding: ``std > ZERO_SPREAD_RTOL *
            max(1, max |r|)`` over the group (see :data:`ZERO_SPREAD_RTOL`).
    """

    mean: torch.Tensor
    std: torch.Tensor
    group_index: torch.Tensor
    num_groups: int
    spread: torch.Tensor


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> GroupStats:
    """Mean and unbiased std of the rewards of each completion's group, ignoring null (NaN) rewards.

    Groups come from ``group_ids``, never from prompt text: two prompts that read the same are still two
    groups, and a group's members may sit anywhere in the batch.

    Args:
        rewards: ``(N,)`` float rewards; NaN marks a completion the reward server could not score.
        group_ids: ``(N,)`` integer group id of each completion.

    Raises:
        ValueError: the two tensors are not 1-D of the same length.
    """
    if rewards.ndim != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of equal length, got {tuple(rewards.shape)}, {tuple(group_ids.shape)}"
        )
    rewards = rewards.to(torch.float64)  # sums of squares in float64 so the hand-computed values match exactly
    valid = ~torch.isnan(rewards)  # (N,)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))  # (N,)
    _, index = torch.unique(group_ids, return_inverse=True)  # (N,) in 0..K-1
    k = int(index.max().item()) + 1 if index.numel() else 0
    count = torch.zeros(k, dtype=torch.float64).index_add_(0, index, valid.to(torch.float64))  # (K,)
    total = torch.zeros(k, dtype=torch.float64).index_add_(0, index, r)  # (K,)
    mean = total / count.clamp(min=1)  # (K,)
    sq_dev = torch.where(valid, (r - mean[index]) ** 2, torch.zeros_like(r))  # (N,)
    ss = torch.zeros(k, dtype=torch.float64).index_add_(0, index, sq_dev)  # (K,)
    std = torch.where(count > 1, (ss / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))  # (K,)
    scale = torch.zeros(k, dtype=torch.float64).scatter_reduce_(0, index, r.abs(), "amax")  # (K,) max |r|
    spread = std > ZERO_SPREAD_RTOL * scale.clamp(min=1.0)  # (K,)
    return GroupStats(mean=mean[index], std=std[index], group_index=index, num_groups=k, spread=spread[index])


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    scale_rewards: ScaleRewards = "group",
    eps: float = ADVANTAGE_EPS,
) -> torch.Tensor:
    """GRPO's group-relative advantage of each completion (DeepSeekMath, section 4.1.2, outcome supervision).

    ``A_i = (r_i - mean(r_group)) / (std(r_group) + eps)`` with the unbiased std, so a group of four with rewards
    ``[1, 0, 0, 1]`` gives ``[+0.866, -0.866, -0.866, +0.866]``.

    * ``scale_rewards="group"``: divide by the std of the completion's group (DeepSeekMath).
    * ``scale_rewards="batch"``: subtract the group mean, divide by the std of all scoreable rewards of the batch.
    * ``scale_rewards="none"``: subtract the group mean only (Dr. GRPO, arXiv 2503.20783, section 3.1: dividing
      by the group std up-weights questions that are too easy or too hard).

    A null reward (NaN) is left out of its group's mean and std, and its completion gets advantage 0: it is not
    trained on, as opposed to being treated as a wrong answer.

    Args:
        rewards: ``(N,)`` rewards, NaN where not scoreable.
        group_ids: ``(N,)`` integer group id of each completion.
        scale_rewards: one of ``group``, ``batch``, ``none``.
        eps: added to the std so a group with equal rewards gives 0, never NaN.

    Returns:
        ``(N,)`` float32 advantages.

    Raises:
        ValueError: unknown ``scale_rewards`` or mismatched shapes.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    stats = group_stats(rewards, group_ids)
    valid = ~torch.isnan(rewards)  # (N,)
    centred = torch.where(valid, rewards.to(torch.float64) - stats.mean, torch.zeros_like(stats.mean))  # (N,)
    centred = torch.where(stats.spread, centred, torch.zeros_like(centred))  # equal up to rounding: exactly 0
    if scale_rewards == "group":
        centred = centred / (stats.std + eps)
    elif scale_rewards == "batch":
        scoreable = rewards[valid].to(torch.float64)
        batch_std = scoreable.std() if scoreable.numel() > 1 else torch.zeros((), dtype=torch.float64)
        centred = centred / (batch_std + eps)
    return centred.to(torch.float32)


def process_advantages(
    step_rewards: torch.Tensor,
    step_ends: torch.Tensor,
    group_ids: torch.Tensor,
    num_tokens: int,
    scale_rewards: ScaleRewards = "group",
    eps: float = ADVANTAGE_EPS,
) -> torch.Tensor:
    """Per-token advantages from step rewards: GRPO with process supervision (DeepSeekMath, section 4.1.3).

    All step rewards of a group (every step of every completion of one prompt) are normalised together,
    ``r~ = (r - mean(R_group)) / (std(R_group) + eps)``, and each token's advantage is the sum of the normalised
    rewards of the steps that end at or after it: ``A_{i,t} = sum_{j : end(j) >= t} r~_{i,j}``. A token after the
    last step gets 0 (the caller decides where the last step ends; the trainer extends it to the completion's end).

    Example: one group, completion 0 has steps ``[1, 0]`` ending at tokens 1 and 3, completion 1 has one step
    ``[1]`` ending at token 2. The group's steps ``[1, 0, 1]`` have mean 2/3 and unbiased std ``sqrt(1/3)``, so
    ``r~ = [+0.577, -1.155]`` and ``[+0.577]``; with ``T = 5`` the token advantages are
    ``[-0.577, -0.577, -1.155, -1.155, 0]`` and ``[0.577, 0.577, 0.577, 0, 0]``.

    ``scale_rewards`` means what it does for :func:`group_advantages`, over steps: ``group`` divides by the group's
    step std, ``batch`` by the std of all steps in the batch, ``none`` only centres. A NaN step reward (padding, or a
    step the server could not score) is left out of the statistics and adds nothing; a completion with no scored
    step gets advantage 0 on every token.

    Args:
        step_rewards: ``(N, S)`` reward of each step, NaN-padded to the most steps ``S`` of any completion.
        step_ends: ``(N, S)`` integer index of each step's last completion token (0-based); ignored where the
            reward is NaN; indices past ``num_tokens - 1`` count as the last token.
        group_ids: ``(N,)`` integer group id of each completion.
        num_tokens: ``T``, the completion width of the batch.
        scale_rewards: ``group``, ``batch`` or ``none``.
        eps: added to the std.

    Returns:
        ``(N, T)`` float32 token advantages.

    Raises:
        ValueError: mismatched shapes, ``num_tokens < 1``, or an unknown ``scale_rewards``.
    """
    if step_rewards.ndim != 2 or step_ends.shape != step_rewards.shape or group_ids.shape != step_rewards.shape[:1]:
        raise ValueError(
            "step_rewards and step_ends must be (N, S) and group_ids (N,), got "
            f"{tuple(step_rewards.shape)}, {tuple(step_ends.shape)}, {tuple(group_ids.shape)}"
        )
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    n, s = step_rewards.shape
    flat = group_advantages(  # every step is one sample of its completion's group
        step_rewards.reshape(-1), group_ids.repeat_interleave(s), scale_rewards, eps
    ).to(torch.float64)  # (N * S,), 0 where NaN
    ends = step_ends.to(torch.long).clamp(0, num_tokens - 1).reshape(-1)  # (N * S,)
    rows = torch.arange(n).repeat_interleave(s)  # (N * S,)
    at_end = torch.zeros(n, num_tokens, dtype=torch.float64).index_put_((rows, ends), flat, accumulate=True)  # (N, T)
    return at_end.flip(-1).cumsum(-1).flip(-1).to(torch.float32)  # (N, T): sum over steps ending at or after t


def frac_zero_std_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Share of groups whose scoreable rewards are all equal (or that have fewer than two): they teach nothing.

    Args:
        rewards: ``(N,)`` rewards, NaN where not scoreable.
        group_ids: ``(N,)`` integer group ids.
    """
    stats = group_stats(rewards, group_ids)
    if stats.num_groups == 0:
        return 0.0
    per_group = torch.zeros(stats.num_groups, dtype=torch.bool).index_copy_(0, stats.group_index, stats.spread)
    return float((~per_group).to(torch.float64).mean().item())


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
            (process supervision, :func:`process_advantages`).
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
    loss_type: LossType,
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
    completions = torch.as_tensor(num_completions_in_batch, dtype=per_token_loss.dtype).clamp(min=1.0)
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / completions
    if loss_type == "bnpo":
        count = mask.sum() if num_items_in_micro_batch is None else num_items_in_micro_batch
        count = torch.as_tensor(count, dtype=per_token_loss.dtype).clamp(min=1.0)
        return masked.sum() / count / gradient_accumulation_steps
    if loss_type == "dr_grpo":
        return masked.sum() / (completions * max_completion_length)
    if loss_type == "dapo":
        if num_items_in_batch is None:
            raise ValueError("loss_type 'dapo' needs num_items_in_batch, the completion tokens of the whole batch")
        normaliser = torch.as_tensor(num_items_in_batch, dtype=per_token_loss.dtype).clamp(min=1.0)
        return masked.sum() / normaliser
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty). Both ``(B, T)``; returns a scalar."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


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
    loss_type: LossType,
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
        importance_weights: ``(B, T)`` or ``(B, 1)`` sampler correction from :func:`sampler_importance_weights`;
            it multiplies the surrogate of each token, not the KL term (as TRL applies it).

    Raises:
        ValueError: ``beta > 0`` without ``ref_logp``, or what :func:`aggregate_loss` raises.
    """
    per_token, is_clipped = clipped_surrogate(logp, old_logp, advantages, epsilon, epsilon_high)  # (B, T)
    if importance_weights is not None:
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
        loss = agg(per_token + beta * kl, mask)
        kl_mean = masked_mean(kl.detach(), mask)
    else:
        loss = policy_part
        kl_mean = torch.zeros(())
    return LossOutput(
        loss=loss,
        policy_loss=policy_part.detach(),
        kl=kl_mean,
        clip_ratio=masked_mean(is_clipped.to(per_token.dtype), mask),
    )
