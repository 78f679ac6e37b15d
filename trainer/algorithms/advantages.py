"""Advantage estimators: the pure math of group advantages, and the registry the loop looks an estimator up in.

The math takes and returns tensors and knows nothing of models, HTTP or the loop; each function is tested
against hand-computed values and a slow reference loop (``tests/trainer/test_grpo.py``). The registered
estimators (:data:`ADVANTAGE_ESTIMATORS`, named by the config's ``advantage_estimator``) share one signature,
``(AdvantageInputs, config) -> EstimatorOutput``, and are the only place that says which scores an estimator reads:
:func:`trainer.train.compute_advantages` builds the same inputs for every one of them. A new estimator (RLOO,
REINFORCE++) is one function decorated with :func:`estimator`; the loop and the config need no edit.

Shapes: ``N`` completions of this process (``prompt_batch_size * num_generations / world_size``), ``B * G`` of
the whole step, ``S`` steps of the completion with the most, ``T`` completion tokens (right-padded).

Sources:
    * DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), section 4.1.2: the group advantage
      ``(r - mean(r)) / std(r)``; section 4.1.3: process supervision, where each reasoning step has a reward and a
      token's advantage is the sum of the normalised rewards of the steps that end at or after it; section 5.2.1:
      online rejection-sampling fine-tuning.
    * Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): no division by the group std.
    * Shao et al. 2025, "Spurious Rewards" (arXiv 2506.10947): the random-reward control.
    * RLOO (Ahmadian et al. 2024, "Back to Basics", arXiv 2402.14740): the leave-one-out baseline.
    * REINFORCE++ (Hu 2025, arXiv 2501.03262): the return whitened over the batch's tokens, with or without a
      group-mean baseline first. Both as verl's ``core_algos`` computes them (``compute_rloo_outcome_advantage``,
      ``compute_reinforce_plus_plus_outcome_advantage``, ``compute_reinforce_plus_plus_baseline_outcome_advantage``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

from trainer.algorithms.registry import Registry

if TYPE_CHECKING:
    from trainer.config import GRPOConfig

ScaleRewards = Literal["group", "batch", "none"]
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")

#: A group's rewards "differ" only when their std exceeds this share of the group's reward scale (``max(1, max
#: |r|)``). Equal shaped rewards that were summed in another order (``0.1 + 0.25`` against ``0.35`` in float32) leave
#: a std of rounding residue (about 1e-8 at scale 1); a fixed 1e-8 threshold read it as spread, and divided by a
#: tiny std such a group gets advantages of thousands. Float32 keeps about 7 digits, so 1e-6 of the scale is above
#: any residue and below any real difference of rewards written with fewer than 6 significant digits.
ZERO_SPREAD_RTOL = 1e-6

#: Added to the std before dividing, so a group whose rewards are all equal gives advantage 0, not NaN.
#: TRL uses the same value, which keeps advantages comparable across the two trainers.
ADVANTAGE_EPS = 1e-4


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


def shuffle_rewards(
    rewards: torch.Tensor, generator: torch.Generator, group_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """The random-reward control (Shao et al. 2025, "Spurious Rewards", arXiv 2506.10947): the scoreable rewards
    permuted, so that a completion's reward says nothing about the completion.

    Across the whole batch (``group_ids`` None) the batch keeps the same rewards, but groups that were all wrong get
    a spread, so many more completions carry an advantage than in GRPO. Within each group (``group_ids`` given) every
    group keeps its own rewards: the step has GRPO's advantages exactly, each given to a random member of its group,
    so the control moves the policy as much as GRPO would at that step and carries no information.

    Args:
        rewards: ``(N,)`` rewards, NaN where not scoreable (a NaN stays where it is).
        generator: the permutation's source (seeded by the caller, so that a run is reproducible).
        group_ids: ``(N,)`` the group of each completion, to permute within groups only; None for the whole batch.

    Returns:
        ``(N,)`` the same multiset of rewards (per group, with ``group_ids``), the scoreable ones in permuted places.
    """
    out = rewards.clone()
    valid = ~torch.isnan(rewards)  # (N,)
    if group_ids is None:
        blocks = [torch.nonzero(valid).flatten()]
    else:
        blocks = [torch.nonzero(valid & (group_ids == g)).flatten() for g in torch.unique(group_ids).tolist()]
    for index in blocks:  # (M,) positions of one block's scoreable rewards
        out[index] = rewards[index[torch.randperm(index.numel(), generator=generator)]]
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
        count: ``(N,)`` float64, the scoreable members of the completion's group.
    """

    mean: torch.Tensor
    std: torch.Tensor
    group_index: torch.Tensor
    num_groups: int
    spread: torch.Tensor
    count: torch.Tensor


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
    return GroupStats(
        mean=mean[index], std=std[index], group_index=index, num_groups=k, spread=spread[index], count=count[index]
    )


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


def _group_centred(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, GroupStats]:
    """``r - mean(r_group)`` in float64 over scoreable rewards, as verl centres for RLOO and REINFORCE++-baseline: a
    group with one scoreable member keeps its reward (verl's baseline of a group of one is 0), a group whose rewards
    are equal up to rounding gets exactly 0, a null gets 0."""
    stats = group_stats(rewards, group_ids)
    valid = ~torch.isnan(rewards)  # (N,)
    r = torch.where(valid, rewards.to(torch.float64), torch.zeros_like(stats.mean))  # (N,)
    centred = torch.where(stats.count > 1, r - stats.mean, r)  # (N,)
    centred = torch.where((stats.count > 1) & ~stats.spread, torch.zeros_like(centred), centred)
    return torch.where(valid, centred, torch.zeros_like(centred)), stats


def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO's advantage (arXiv 2402.14740, eq. 6): each reward minus the mean of the *other* scoreable rewards of its
    group, ``A_i = r_i - sum_{j != i} r_j / (n - 1) = (r_i - mean(r_group)) * n / (n - 1)``, so ``[1, 0, 0, 1]``
    gives ``[+2/3, -2/3, -2/3, +2/3]``.

    As verl's ``compute_rloo_outcome_advantage``: a group with one scoreable member has baseline 0 (its advantage is
    its reward). A null reward is in no baseline and gets 0; a group of equal rewards gets exactly 0.

    Args:
        rewards: ``(N,)`` rewards, NaN where not scoreable.
        group_ids: ``(N,)`` integer group id of each completion.

    Returns:
        ``(N,)`` float32 advantages.
    """
    centred, stats = _group_centred(rewards, group_ids)
    n = stats.count
    return torch.where(n > 1, centred * n / (n - 1).clamp(min=1.0), centred).to(torch.float32)


#: Added to the token variance before its square root in REINFORCE++'s whitening (verl's ``masked_whiten``).
WHITEN_EPS = 1e-8


def token_whiten(values: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
    """Whiten one value per completion over the batch's *tokens* (verl's ``masked_whiten`` of a value repeated on
    every token of its completion): ``(v_i - m) / sqrt(var + 1e-8)`` with ``m = sum_i L_i v_i / sum_i L_i`` and the
    unbiased variance over the ``sum_i L_i`` tokens, so a long completion weighs more in the statistics.

    Args:
        values: ``(N,)`` one value per completion (float64 recommended).
        token_counts: ``(N,)`` the tokens of each completion that count (0 leaves a completion out).

    Returns:
        ``(N,)`` float64; the input unchanged where fewer than two tokens count in the whole batch.
    """
    weights = token_counts.to(torch.float64)  # (N,)
    v = values.to(torch.float64)  # (N,)
    total = weights.sum()
    if total < 2:
        return v
    mean = (weights * v).sum() / total
    var = (weights * (v - mean) ** 2).sum() / (total - 1)  # unbiased over tokens
    return (v - mean) / torch.sqrt(var + WHITEN_EPS)


def reinforce_plus_plus_advantages(
    rewards: torch.Tensor, token_counts: torch.Tensor, group_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """REINFORCE++'s advantage (arXiv 2501.03262, section 3): the outcome reward whitened over the batch's tokens
    (:func:`token_whiten`), with no discount (verl's ``gamma: 1``, so every token's return is the reward). With
    ``group_ids``, REINFORCE++-baseline: each reward minus its group's mean first (a group of one keeps its reward, as
    in verl), then the same whitening.

    A null reward is in no statistic and gets 0; so does a completion with no counted token.

    Args:
        rewards: ``(N,)`` rewards, NaN where not scoreable.
        token_counts: ``(N,)`` completion tokens the loss counts of each completion.
        group_ids: ``(N,)`` group ids for the baseline variant, or ``None``.

    Returns:
        ``(N,)`` float32 advantages (the same on every token of a completion).
    """
    valid = ~torch.isnan(rewards)  # (N,)
    if group_ids is None:
        centred = torch.where(valid, rewards.to(torch.float64), torch.zeros((), dtype=torch.float64))  # (N,)
    else:
        centred, _ = _group_centred(rewards, group_ids)
    counts = torch.where(valid, token_counts.to(torch.float64), torch.zeros((), dtype=torch.float64))  # (N,)
    whitened = token_whiten(centred, counts)
    return torch.where(valid & (counts > 0), whitened, torch.zeros_like(whitened)).to(torch.float32)


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


def zero_advantage_groups(advantages: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """The rows of groups in which every advantage is exactly 0, for ``mask_zero_advantage_groups``: with
    ``beta > 0`` such a group still draws KL gradient, which the option removes (its rows leave the loss mask).

    Args:
        advantages: ``(N,)`` per completion or ``(N, C)`` per token.
        group_ids: ``(N,)`` integer group ids (groups are whole on each rank).

    Returns:
        ``(N,)`` bool: True on every row of an all-zero group. ``[0, 0 | 1, -1 | 0, 0]`` with groups of two gives
        ``[T, T, F, F, T, T]``; a lone zero row inside a group with spread stays False.
    """
    row_zero = (advantages == 0).reshape(len(advantages), -1).all(-1)  # (N,)
    _, index = torch.unique(group_ids, return_inverse=True)  # (N,)
    nonzero_rows = torch.zeros(int(index.max()) + 1 if len(index) else 0, dtype=torch.long)
    nonzero_rows.index_add_(0, index, (~row_zero).long())  # (K,)
    return nonzero_rows[index] == 0


# ------------------------------------------------------------------------------------------------------ estimators


class Reductions(Protocol):
    """What an estimator may ask of the processes (:class:`trainer.distributed.Distributed` is one)."""

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        """Concatenate every process's ``(n, ...)`` tensor in rank order."""
        ...

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum a tensor over the processes."""
        ...

    def shard(self, n: int) -> slice:
        """This process's rows of ``n`` whole-step rows."""
        ...


@dataclass(frozen=True)
class StepRewards:
    """This process's step rewards (process supervision), as :func:`trainer.steps.step_tensors` gives them.

    Attributes:
        rewards: ``(N, S)`` float, NaN where a completion has fewer steps or a step has no score (all NaN when no
            steps were asked of the server).
        ends: ``(N, S)`` long index of each step's last completion token.
        counts: ``(N,)`` steps the server returned for each completion, scored or not.
    """

    rewards: torch.Tensor
    ends: torch.Tensor
    counts: torch.Tensor


@dataclass(frozen=True)
class AdvantageInputs:
    """What the loop hands every estimator: one step's scores of this process's completions.

    Attributes:
        rewards: ``(N,)`` float rewards, NaN where the server could not score.
        verified: ``(N,)`` 1.0 for a verified completion, 0.0 for another, NaN where the reward is null (``rft``).
        group_ids: ``(N,)`` explicit group ids (prompt ``i`` of the step is group ``i``, on every process).
        steps: the step rewards.
        num_tokens: ``T``, the completion width of the batch.
        token_counts: ``(N,)`` completion tokens the loss may count of each completion (the completion mask, after
            ``mask_truncated_completions``); REINFORCE++ whitens over them.
        seed: the step's seed for an estimator's randomness (``shuffle_rewards``' permutation).
        reduce: gathers and sums over the processes; per-completion estimators see the whole step.
    """

    rewards: torch.Tensor
    verified: torch.Tensor
    group_ids: torch.Tensor
    steps: StepRewards
    num_tokens: int
    token_counts: torch.Tensor
    seed: int
    reduce: Reductions


@dataclass(frozen=True)
class EstimatorOutput:
    """What an estimator returns.

    Attributes:
        advantages: ``(N,)`` one per completion of this process, or ``(N, T)`` one per token.
        trained: ``(N,)`` bool, completions the loss counts (a null reward, or no scored step, is not trained on).
        metrics: figures for the step's metrics row (``steps/*``), the same on every process.
    """

    advantages: torch.Tensor
    trained: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


EstimatorFn = Callable[[AdvantageInputs, "GRPOConfig"], EstimatorOutput]


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator.

    Attributes:
        compute: ``(inputs, config) -> EstimatorOutput``.
        needs_steps: the reward items ask the server for each completion's steps (``step_component``).
    """

    compute: EstimatorFn
    needs_steps: bool = False


#: The ``advantage_estimator`` choices, in the order the config's error lists them.
ADVANTAGE_ESTIMATORS: Registry[Estimator] = Registry("advantage_estimator")


def estimator(name: str, *, needs_steps: bool = False) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register the decorated function as ``advantage_estimator: name`` (verl's ``register_adv_est``).

    Args:
        name: the config value that chooses it.
        needs_steps: the server must return each completion's scored steps (see :class:`Estimator`).
    """

    def add(fn: EstimatorFn) -> EstimatorFn:
        ADVANTAGE_ESTIMATORS.register(name)(Estimator(fn, needs_steps))
        return fn

    return add


def _whole_step(scores: torch.Tensor, inputs: AdvantageInputs, config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B * G,)`` scores and group ids of every process (``scale_rewards: batch`` needs the whole batch's std),
    the scores permuted across the step or within each group with ``shuffle_rewards`` (the random-reward control)."""
    scores, group_ids = inputs.reduce.gather(scores), inputs.reduce.gather(inputs.group_ids)  # (B * G,) each
    if config.shuffle_rewards:
        within = group_ids if config.shuffle_rewards == "group" else None
        scores = shuffle_rewards(scores, torch.Generator().manual_seed(inputs.seed), within)
    return scores, group_ids


@estimator("outcome")
def outcome(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
    """GRPO's outcome supervision: one group advantage per completion (:func:`group_advantages`)."""
    scores, group_ids = _whole_step(inputs.rewards, inputs, config)  # (B * G,)
    advantages = group_advantages(scores, group_ids, config.scale_rewards)  # (B * G,)
    return EstimatorOutput(advantages[inputs.reduce.shard(len(scores))], trained=~torch.isnan(inputs.rewards))


@estimator("process", needs_steps=True)
def process(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
    """Process supervision: the server's step rewards, normalised over each group's steps, summed over the steps
    at or after each token (DeepSeekMath 4.1.3, :func:`process_advantages`); a completion with no scored step is
    not trained on. Groups are whole on each process, so ``scale_rewards`` ``group`` and ``none`` are exact here
    without gathering (``batch`` on several processes is refused by the config checks)."""
    steps = inputs.steps
    advantages = process_advantages(  # (N, T)
        steps.rewards, steps.ends, inputs.group_ids, inputs.num_tokens, config.scale_rewards
    )
    scores = steps.rewards[~torch.isnan(steps.rewards)]
    counts = inputs.reduce.sum(
        torch.tensor([int(steps.counts.sum()), steps.counts.numel(), scores.numel(), scores.sum()], dtype=torch.float64)
    )
    return EstimatorOutput(
        advantages,
        trained=(~torch.isnan(steps.rewards)).any(-1),  # (N,)
        metrics={
            "steps/per_completion": float(counts[0] / max(float(counts[1]), 1.0)),
            "steps/frac_scored": float(counts[2] / max(float(counts[0]), 1.0)),
            "steps/mean_score": float(counts[3] / counts[2]) if counts[2] else math.nan,
        },
    )


@estimator("rft")
def rft(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
    """Online rejection-sampling fine-tuning: 1 for a verified completion, 0 otherwise (:func:`rft_advantages`)."""
    scores, _ = _whole_step(inputs.verified, inputs, config)  # (B * G,)
    return EstimatorOutput(
        rft_advantages(scores)[inputs.reduce.shard(len(scores))], trained=~torch.isnan(inputs.rewards)
    )


def _scoreable(inputs: AdvantageInputs) -> torch.Tensor:
    return ~torch.isnan(inputs.rewards)


@estimator("rloo")
def rloo(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
    """RLOO (arXiv 2402.14740): the leave-one-out group baseline, no std scaling (:func:`rloo_advantages`); verl's
    ``adv_estimator: rloo``."""
    scores, group_ids = _whole_step(inputs.rewards, inputs, config)  # (B * G,)
    advantages = rloo_advantages(scores, group_ids)
    return EstimatorOutput(advantages[inputs.reduce.shard(len(scores))], trained=_scoreable(inputs))


def _whitened(inputs: AdvantageInputs, config: GRPOConfig, *, baseline: bool) -> EstimatorOutput:
    """REINFORCE++ over the whole step, with or without the group baseline (:func:`reinforce_plus_plus_advantages`)."""
    scores, group_ids = _whole_step(inputs.rewards, inputs, config)  # (B * G,)
    counts = inputs.reduce.gather(inputs.token_counts)  # (B * G,)
    advantages = reinforce_plus_plus_advantages(scores, counts, group_ids if baseline else None)
    return EstimatorOutput(advantages[inputs.reduce.shard(len(scores))], trained=_scoreable(inputs))


@estimator("reinforce_plus_plus")
def reinforce_plus_plus(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
    """REINFORCE++ (arXiv 2501.03262): the reward whitened over the step's tokens, no group baseline; verl's
    ``adv_estimator: reinforce_plus_plus``."""
    return _whitened(inputs, config, baseline=False)


@estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
    """REINFORCE++-baseline (arXiv 2501.03262): the group mean subtracted, then whitened over the step's tokens;
    verl's ``adv_estimator: reinforce_plus_plus_baseline``."""
    return _whitened(inputs, config, baseline=True)
