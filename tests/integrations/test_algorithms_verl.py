"""Our advantage estimators against verl's own ``core_algos`` on the same hand-made batches (issue 22).

verl's functions take token-level rewards (the outcome reward on a completion's last token), a response mask and
group indices; ours take one reward per completion (NaN for a null), the tokens each completion counts and group
ids. verl has no null reward: a null completion is left out of verl's batch, and ours must give it advantage 0 and
give the others exactly what verl gives the batch without it. Only ``trainer.algorithms.*`` is imported (torch
alone), so these tests need none of the trainer's other dependencies.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

from trainer.algorithms.advantages import reinforce_plus_plus_advantages, rloo_advantages

NAN = math.nan

#: (rewards, group ids, completion lengths): nulls, a zero-spread group of non-dyadic rewards, a group left with one
#: scoreable member, unequal lengths (a truncated row is one of full width 6), a row with no counted token.
BATCHES = {
    "binary": ([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0], [0, 0, 0, 0, 1, 1, 1, 1], [3, 6, 2, 5, 6, 1, 4, 6]),
    "nulls": ([1.0, NAN, 0.0, 1.0, NAN, 0.5, 0.25, NAN], [0, 0, 0, 0, 1, 1, 1, 1], [3, 6, 2, 5, 6, 1, 4, 6]),
    "zero_spread": ([0.1, 0.1, 0.1, 0.1, 0.35, 0.1, 0.7, 0.2], [0, 0, 0, 0, 1, 1, 1, 1], [6, 6, 2, 5, 6, 3, 4, 6]),
    "one_left": ([NAN, 0.3, NAN, NAN, 1.0, 0.0, 0.5, 2.0], [0, 0, 0, 0, 1, 1, 1, 1], [3, 6, 2, 5, 6, 6, 4, 1]),
    "shaped": ([1.3, -0.2, 0.7, 2.9, 0.45, 0.45, 1.1, -1.7], [2, 5, 2, 5, 2, 5, 2, 5], [6, 2, 6, 3, 1, 6, 5, 4]),
}
WIDTH = 6


def _verl_inputs(
    rewards: list[float], groups: list[int], lengths: list[int]
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, list[int]]:
    """verl's inputs for the scoreable rows: token rewards on each last token, response mask, index; their rows."""
    keep = [i for i, r in enumerate(rewards) if not math.isnan(r)]
    token_rewards = torch.zeros(len(keep), WIDTH)
    mask = torch.zeros(len(keep), WIDTH)
    for row, i in enumerate(keep):
        mask[row, : lengths[i]] = 1.0
        token_rewards[row, lengths[i] - 1] = rewards[i]
    return token_rewards, mask, np.array([groups[i] for i in keep]), keep


def _ours_on_tokens(advantages: torch.Tensor, lengths: list[int], keep: list[int]) -> torch.Tensor:
    """Our per-completion advantages on each counted token, for the rows verl saw."""
    mask = (torch.arange(WIDTH) < torch.tensor(lengths).unsqueeze(-1)).float()  # (N, T)
    return (advantages.unsqueeze(-1) * mask)[keep]


def _check_nulls_are_zero(advantages: torch.Tensor, rewards: list[float]) -> None:
    nulls = torch.isnan(torch.tensor(rewards))
    assert torch.equal(advantages[nulls], torch.zeros(int(nulls.sum())))


def _verl(estimator: str, token_rewards: torch.Tensor, mask: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    if estimator == "rloo":
        return core_algos.compute_rloo_outcome_advantage(token_rewards, mask, index)[0]
    if estimator == "reinforce_plus_plus":
        config = AlgoConfig(gamma=1.0)
        return core_algos.compute_reinforce_plus_plus_outcome_advantage(token_rewards, mask, config=config)[0]
    return core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(token_rewards, mask, index)[0]


def _ours(estimator: str, rewards: torch.Tensor, lengths: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    if estimator == "rloo":
        return rloo_advantages(rewards, groups)
    return reinforce_plus_plus_advantages(rewards, lengths, groups if estimator.endswith("baseline") else None)


@pytest.mark.parametrize("estimator", ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_the_estimator_equals_verls(estimator: str, name: str) -> None:
    rewards, groups, lengths = BATCHES[name]
    token_rewards, mask, index, keep = _verl_inputs(rewards, groups, lengths)
    theirs = _verl(estimator, token_rewards, mask, index)
    ours = _ours(estimator, torch.tensor(rewards), torch.tensor(lengths), torch.tensor(groups))
    torch.testing.assert_close(_ours_on_tokens(ours, lengths, keep), theirs)
    _check_nulls_are_zero(ours, rewards)


def test_the_estimators_are_registered_under_verls_names() -> None:
    from trainer.algorithms.advantages import ADVANTAGE_ESTIMATORS

    for name in ("rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        assert name in ADVANTAGE_ESTIMATORS
        assert core_algos.get_adv_estimator_fn(name) is not None  # verl knows it by the same name


# ------------------------------------------------------------------------------------------- GSPO-token (verl's gspo)


@pytest.mark.parametrize(("agg_mode", "loss_type"), [("token-mean", "bnpo"), ("seq-mean-token-mean", "grpo")])
@pytest.mark.parametrize("seed", [0, 1])
def test_gspo_token_equals_verls_gspo_policy_loss(agg_mode: str, loss_type: str, seed: int) -> None:
    """``importance_sampling_level: sequence_token`` against verl's ``compute_policy_loss_gspo`` (GSPO-token, with
    per-token advantages, where it differs from GSPO): values and gradients."""
    from verl.workers.config import ActorConfig

    from trainer.algorithms.losses import PolicyOptions, grpo_loss

    g = torch.Generator().manual_seed(seed)
    lengths = [3, 6, 1, 4]  # 6 is a truncated row of full width
    mask = (torch.arange(WIDTH) < torch.tensor(lengths).unsqueeze(-1)).float()
    logp = -torch.rand(4, WIDTH, generator=g, dtype=torch.float64).requires_grad_()
    old = logp.detach() + (torch.rand(4, WIDTH, generator=g, dtype=torch.float64) - 0.5) * 1.2
    advantages = torch.randn(4, WIDTH, generator=g, dtype=torch.float64)  # per token: GSPO-token's case
    config = ActorConfig(
        strategy="fsdp", clip_ratio_low=0.2, clip_ratio_high=0.28, ppo_micro_batch_size_per_gpu=1, rollout_n=2
    )
    theirs, _ = core_algos.compute_policy_loss_gspo(old, logp, advantages, mask, agg_mode, config)
    ours = grpo_loss(
        logp,
        old,
        advantages,
        mask,
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        ref_logp=None,
        max_completion_length=WIDTH,
        options=PolicyOptions(importance_sampling_level="sequence_token"),
    ).loss
    (their_grad,) = torch.autograd.grad(theirs, logp)
    (our_grad,) = torch.autograd.grad(ours, logp)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)


@pytest.mark.parametrize("seed", [0, 1])
def test_two_sided_clipping_equals_verls_dual_clip(seed: int) -> None:
    """``delta`` (TRL's two-sided clipping) is verl's dual-clip PPO with ``clip_ratio_c = delta`` when ``delta >
    1 + epsilon_high``: ``vanilla`` loss, ``token-mean`` against ``bnpo``, values and gradients."""
    from verl.workers.config import ActorConfig

    from trainer.algorithms.losses import PolicyOptions, grpo_loss

    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(WIDTH) < torch.tensor([3, 6, 1, 4]).unsqueeze(-1)).float()
    logp = -torch.rand(4, WIDTH, generator=g, dtype=torch.float64).requires_grad_()
    old = logp.detach() + (torch.rand(4, WIDTH, generator=g, dtype=torch.float64) - 0.8) * 2.0  # ratios up to ~5
    advantages = torch.tensor([[1.0], [-1.0], [-0.5], [2.0]], dtype=torch.float64).expand(4, WIDTH)
    config = ActorConfig(
        strategy="fsdp",
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=2.0,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=2,
    )
    theirs, _ = core_algos.compute_policy_loss_vanilla(old, logp, advantages, mask, "token-mean", config)
    ours = grpo_loss(
        logp,
        old,
        advantages[:, 0],
        mask,
        loss_type="bnpo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        ref_logp=None,
        max_completion_length=WIDTH,
        options=PolicyOptions(delta=2.0),
    ).loss
    assert (torch.exp(logp.detach() - old)[1][mask[1].bool()] > 2.0).any()  # the bound binds on a negative row
    (their_grad,) = torch.autograd.grad(theirs, logp)
    (our_grad,) = torch.autograd.grad(ours, logp)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)


# --------------------------------------------------------------------------------------- KL-Cov and Clip-Cov


def _cov_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of lengths 3, 6 (truncated), 1 and 4; advantages per row; ratios in about [0.5, 1.8]; log-probs spread
    enough that covariances reach Clip-Cov's window (1, 5)."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(WIDTH) < torch.tensor([3, 6, 1, 4]).unsqueeze(-1)).float()
    logp = (-6 * torch.rand(4, WIDTH, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + (torch.rand(4, WIDTH, generator=g, dtype=torch.float64) - 0.5) * 1.2
    advantages = torch.tensor([[2.0], [-1.5], [0.5], [-2.5]], dtype=torch.float64).expand(4, WIDTH)
    return logp, old, advantages, mask


def _ours_cov(
    loss_type: str, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, **options: float
) -> torch.Tensor:
    from trainer.algorithms.losses import PolicyOptions, grpo_loss

    return grpo_loss(
        logp,
        old,
        adv[:, 0],
        mask,
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        ref_logp=None,
        max_completion_length=WIDTH,
        num_items_in_batch=mask.sum(),
        options=PolicyOptions(**options),
    ).loss


@pytest.mark.parametrize("ratio", [0.0002, 0.2, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_kl_cov_equals_verls(ratio: float, seed: int) -> None:
    """``loss_type: kl_cov`` against verl's ``compute_policy_loss_kl_cov`` (``token-mean``): values and gradients;
    0.0002 of 14 tokens still penalises one, as in verl."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    logp, old, adv, mask = _cov_batch(seed)
    config = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=2,
        policy_loss=PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=ratio, ppo_kl_coef=0.7),
    )
    theirs, _ = core_algos.compute_policy_loss_kl_cov(old, logp, adv, mask, "token-mean", config)
    ours = _ours_cov("kl_cov", logp, old, adv, mask, kl_cov_ratio=ratio, ppo_kl_coef=0.7)
    (their_grad,) = torch.autograd.grad(theirs, logp)
    (our_grad,) = torch.autograd.grad(ours, logp)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)
    plain = _ours_cov("kl_cov", logp, old, adv, mask, kl_cov_ratio=ratio, ppo_kl_coef=0.0)
    assert float(ours) > float(plain)  # the penalty is there, so equality is not the unpenalised surrogate's


def test_the_covariance_options_default_to_verls() -> None:
    """A verl recipe that leaves ``kl_cov_ratio``, ``ppo_kl_coef`` or the Clip-Cov bounds unset gets verl's values
    here too (``ppo_kl_coef`` is 0.1 in verl's config, though its loss's docstring says 1)."""
    from verl.workers.config import PolicyLossConfig

    from trainer.algorithms.losses import PolicyOptions

    theirs, ours = PolicyLossConfig(), PolicyOptions()
    for name in ("kl_cov_ratio", "ppo_kl_coef", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"):
        assert getattr(ours, name) == getattr(theirs, name), name


@pytest.mark.parametrize("ratio", [0.0002, 0.3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clip_cov_equals_verls_under_the_same_seed(ratio: float, seed: int) -> None:
    """``loss_type: clip_cov`` against verl's ``compute_policy_loss_clip_cov``: it draws the tokens to cut with
    ``torch.randperm``, so both run under the same torch seed; values and gradients."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    logp, old, adv, mask = _cov_batch(seed)
    config = ActorConfig(
        strategy="fsdp",
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=2,
        policy_loss=PolicyLossConfig(loss_mode="clip_cov", clip_cov_ratio=ratio, clip_cov_lb=1.0, clip_cov_ub=5.0),
    )
    torch.manual_seed(100 + seed)
    theirs, metrics = core_algos.compute_policy_loss_clip_cov(old, logp, adv, mask, "token-mean", config)
    torch.manual_seed(100 + seed)
    ours = _ours_cov("clip_cov", logp, old, adv, mask, clip_cov_ratio=ratio, clip_cov_lb=1.0, clip_cov_ub=5.0)
    (their_grad,) = torch.autograd.grad(theirs, logp)
    (our_grad,) = torch.autograd.grad(ours, logp)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)
    assert metrics["actor/pg_clipfrac"] > 0  # some token was cut: the test exercises the selection


# ------------------------------------------------------------------------------------------- the entropy bonus


@pytest.mark.parametrize(
    ("agg_mode", "loss_type"),
    [
        ("token-mean", "bnpo"),
        ("token-mean", "dapo"),
        ("token-mean", "kl_cov"),
        ("seq-mean-token-mean", "grpo"),
        ("seq-mean-token-sum-norm", "dr_grpo"),
        ("seq-mean-token-sum", "luspo"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_entropy_bonus_equals_verls(agg_mode: str, loss_type: str, seed: int) -> None:
    """``entropy_coeff`` against verl's actor loss, ``pg_loss - entropy_coeff * agg_loss(entropy, response_mask,
    loss_agg_mode)``, with each side's own entropy of the same logits: values and gradients in the logits."""
    from verl.utils.torch_functional import entropy_from_logits as verl_entropy
    from verl.workers.config import ActorConfig, PolicyLossConfig

    from trainer.algorithms.logprobs import entropy_from_logits, token_log_probs
    from trainer.algorithms.losses import PolicyOptions, grpo_loss

    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(WIDTH) < torch.tensor([3, 6, 1, 4]).unsqueeze(-1)).float()  # 6: a truncated row
    logits = (3 * torch.randn(4, WIDTH, 11, generator=g, dtype=torch.float64)).requires_grad_()
    tokens = torch.randint(11, (4, WIDTH), generator=g)
    logp = token_log_probs(logits, tokens)
    old = logp.detach() + (torch.rand(4, WIDTH, generator=g, dtype=torch.float64) - 0.5) * 1.2  # ratios < 3
    advantages = torch.tensor([[1.5], [-1.0], [0.5], [-2.0]], dtype=torch.float64).expand(4, WIDTH)
    coeff = 0.03
    mode = "kl_cov" if loss_type == "kl_cov" else "vanilla"
    config = ActorConfig(
        strategy="fsdp",
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=3.0,
        entropy_coeff=coeff,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=2,
        policy_loss=PolicyLossConfig(loss_mode=mode, kl_cov_ratio=0.2),
    )
    pg_loss, _ = core_algos.get_policy_loss_fn(mode)(old, logp, advantages, mask, agg_mode, config)
    theirs = pg_loss - config.entropy_coeff * core_algos.agg_loss(verl_entropy(logits), mask, agg_mode)
    ours = grpo_loss(
        logp,
        old,
        advantages[:, 0],
        mask,
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        ref_logp=None,
        max_completion_length=WIDTH,
        num_items_in_batch=mask.sum(),
        options=PolicyOptions(delta=3.0, entropy_coeff=coeff, kl_cov_ratio=0.2),
        entropy=entropy_from_logits(logits),
    ).loss
    (their_grad,) = torch.autograd.grad(theirs, logits, retain_graph=True)
    (our_grad,) = torch.autograd.grad(ours, logits, retain_graph=True)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)
    (pg_grad,) = torch.autograd.grad(pg_loss, logits)
    assert not torch.allclose(our_grad, pg_grad)  # the bonus moves the gradient: equality is not the policy term's
