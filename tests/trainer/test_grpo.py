"""GRPO math against hand-computed tensors and a slow reference loop."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.grpo import (
    ADVANTAGE_EPS,
    aggregate_loss,
    clipped_surrogate,
    entropy_from_logits,
    frac_zero_std_groups,
    group_advantages,
    grpo_loss,
    kl_k3,
    sampler_importance_weights,
    token_log_probs,
)

NAN = float("nan")
SQRT_THIRD = math.sqrt(1 / 3)


def _t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _ids(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


# ----------------------------------------------------------------------------------------------------- advantages


def test_issue_example_one_zero_zero_one_gives_plus_minus_0866() -> None:
    adv = group_advantages(_t([1, 0, 0, 1]), _ids([0, 0, 0, 0]), "group")
    # mean 0.5, unbiased std sqrt((4 * 0.25) / 3) = 0.57735; 0.5 / 0.57735 = 0.866
    expected = 0.5 / (SQRT_THIRD + ADVANTAGE_EPS)
    assert adv.tolist() == pytest.approx([expected, -expected, -expected, expected], abs=1e-6)
    assert adv[0].item() == pytest.approx(0.866, abs=1e-3)


@pytest.mark.parametrize(
    ("rewards", "group_ids", "mode", "expected"),
    [
        # Dr. GRPO: centre only.
        ([1, 0, 0, 1], [0, 0, 0, 0], "none", [0.5, -0.5, -0.5, 0.5]),
        # Two groups interleaved in the batch: group 7 = [1, 0] (mean .5, std sqrt(.5)), group 3 = [2, 4]
        # (mean 3, std sqrt(2)); membership comes from the ids, not from position.
        (
            [1, 2, 0, 4],
            [7, 3, 7, 3],
            "group",
            [
                0.5 / (math.sqrt(0.5) + ADVANTAGE_EPS),
                -1 / (math.sqrt(2) + ADVANTAGE_EPS),
                -0.5 / (math.sqrt(0.5) + ADVANTAGE_EPS),
                1 / (math.sqrt(2) + ADVANTAGE_EPS),
            ],
        ),
        # batch: centre per group, divide by the std of all rewards [1, 0, 1, 1] = 0.5.
        ([1, 0, 1, 1], [0, 0, 1, 1], "batch", [0.5 / (0.5 + ADVANTAGE_EPS), -0.5 / (0.5 + ADVANTAGE_EPS), 0, 0]),
        # Equal rewards: zero, not NaN, thanks to the epsilon.
        ([1, 1, 1, 1], [0, 0, 0, 0], "group", [0, 0, 0, 0]),
        # A group of one has nothing to compare with.
        ([0.7], [5], "group", [0.0]),
        # Null reward left out: [1, 0, 0] has mean 1/3 and std sqrt(1/3); the null one gets 0.
        (
            [1, NAN, 0, 0],
            [0, 0, 0, 0],
            "group",
            [
                (2 / 3) / (SQRT_THIRD + ADVANTAGE_EPS),
                0,
                -(1 / 3) / (SQRT_THIRD + ADVANTAGE_EPS),
                -(1 / 3) / (SQRT_THIRD + ADVANTAGE_EPS),
            ],
        ),
        # Null rewards must not count as 0 in the batch std either: std of [1, 0] = sqrt(.5).
        (
            [1, 0, NAN, NAN],
            [0, 0, 1, 1],
            "batch",
            [0.5 / (math.sqrt(0.5) + ADVANTAGE_EPS), -0.5 / (math.sqrt(0.5) + ADVANTAGE_EPS), 0, 0],
        ),
        # A whole group of nulls: all 0, no NaN leaks out.
        ([NAN, NAN, 1, 0], [0, 0, 1, 1], "none", [0, 0, 0.5, -0.5]),
    ],
)
def test_group_advantages_hand_computed(
    rewards: list[float], group_ids: list[int], mode: str, expected: list[float]
) -> None:
    adv = group_advantages(_t(rewards), _ids(group_ids), mode)  # type: ignore[arg-type]
    assert not torch.isnan(adv).any()
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)


def test_same_prompt_text_in_two_groups_stays_two_groups() -> None:
    # Group ids are the only grouping; identical rewards split by id must not be pooled.
    adv = group_advantages(_t([1, 1, 0, 0]), _ids([0, 0, 1, 1]), "group")
    assert adv.tolist() == [0, 0, 0, 0]


def test_null_rewards_change_nothing_for_the_others() -> None:
    # Adding a null item to a group leaves the other advantages exactly as without it (whole kind: any value).
    for nulls in range(1, 4):
        base = group_advantages(_t([0.2, 0.9, 0.4]), _ids([1, 1, 1]))
        padded = group_advantages(_t([0.2, 0.9, 0.4] + [NAN] * nulls), _ids([1, 1, 1] + [1] * nulls))
        assert padded[:3].tolist() == pytest.approx(base.tolist(), abs=1e-7)
        assert padded[3:].tolist() == [0.0] * nulls


def test_unknown_scale_rewards_is_refused() -> None:
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(_t([1, 0]), _ids([0, 0]), "std")  # type: ignore[arg-type]


def test_frac_zero_std_groups() -> None:
    rewards = _t([1, 1, 0, 1, NAN, 0.5, 0, 0])
    ids = _ids([0, 0, 1, 1, 2, 2, 3, 3])  # groups: equal, mixed, one scoreable, equal
    assert frac_zero_std_groups(rewards, ids) == 0.75


# -------------------------------------------------------------------------------------------- surrogate, KL, loss


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped"),
    [
        (1.5, 1.0, -1.28, True),  # above 1 + epsilon_high with A > 0: capped at 1.28
        (0.5, -1.0, 0.8, True),  # below 1 - epsilon with A < 0: min(-0.5, -0.8) = -0.8
        (1.1, 2.0, -2.2, False),  # inside the range
        (0.5, 1.0, -0.5, False),  # below the range but A > 0: the unclipped term is smaller, gradient kept
        (1.5, -1.0, 1.5, False),  # above the range but A < 0: unclipped -1.5 is the min, gradient kept
        (1.25, 1.0, -1.25, False),  # between 1 + epsilon and 1 + epsilon_high: clip-higher lets it through
    ],
)
def test_clipped_surrogate_hand_computed(ratio: float, adv: float, loss: float, clipped: bool) -> None:
    old = torch.log(_t([0.2])).reshape(1, 1)
    logp = old + math.log(ratio)
    per_token, is_clipped = clipped_surrogate(logp, old, _t([adv]), epsilon=0.2, epsilon_high=0.28)
    assert per_token.item() == pytest.approx(loss, abs=1e-5)
    assert bool(is_clipped.item()) is clipped


def test_epsilon_high_defaults_to_epsilon() -> None:
    old = torch.zeros(1, 1)
    per_token, _ = clipped_surrogate(old + math.log(1.5), old, _t([1.0]), epsilon=0.2)
    assert per_token.item() == pytest.approx(-1.2, abs=1e-6)


def test_kl_k3_hand_computed() -> None:
    logp = torch.log(_t([0.5, 0.3, 0.9])).reshape(1, 3)
    ref = torch.log(_t([0.25, 0.3, 0.99])).reshape(1, 3)
    # k3 = r - log r - 1 with r = p_ref / p
    expected = [r - math.log(r) - 1 for r in (0.5, 1.0, 1.1)]
    assert kl_k3(logp, ref)[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert kl_k3(logp, ref)[0, 1].item() == 0.0


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        ("grpo", (6 / 3 + 4 / 1) / 2),  # token mean per completion, then mean over completions
        ("bnpo", 10 / 4),  # all tokens of the micro-batch
        ("dr_grpo", 10 / (2 * 5)),  # B * max_completion_length
        ("dapo", 10 / 8),  # tokens of the whole accumulated batch
    ],
)
def test_aggregate_loss_hand_computed(loss_type: str, expected: float) -> None:
    per_token = _t([1, 2, 3, 4, 9, 9]).reshape(2, 3)
    mask = _t([1, 1, 1, 1, 0, 0]).reshape(2, 3)
    got = aggregate_loss(per_token, mask, loss_type, max_completion_length=5, num_items_in_batch=8)  # type: ignore[arg-type]
    assert got.item() == pytest.approx(expected)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_micro_batches_sum_to_the_batch_loss(loss_type: str) -> None:
    gen = torch.Generator().manual_seed(0)
    per_token = torch.randn(4, 6, generator=gen)
    mask = (torch.rand(4, 6, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    kw = {"max_completion_length": 6, "num_items_in_batch": mask.sum()}
    whole = aggregate_loss(per_token, mask, loss_type, **kw)  # type: ignore[arg-type]
    halves = sum(
        aggregate_loss(per_token[i : i + 2], mask[i : i + 2], loss_type, gradient_accumulation_steps=2, **kw)  # type: ignore[arg-type]
        for i in (0, 2)
    )
    assert float(halves) == pytest.approx(whole.item(), abs=1e-6)


def test_dapo_needs_the_batch_token_count() -> None:
    with pytest.raises(ValueError, match="num_items_in_batch"):
        aggregate_loss(torch.ones(1, 2), torch.ones(1, 2), "dapo", max_completion_length=2)


def _slow_reference_loss(
    logp: torch.Tensor,
    old: torch.Tensor,
    ref: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    eps: float,
    eps_high: float,
    beta: float,
    max_len: int,
    batch_tokens: float,
) -> torch.Tensor:
    """DeepSeekMath eq. 3 written as the paper reads: one token at a time."""
    rows = []
    total = torch.zeros(())
    n_tokens = 0
    for i in range(logp.shape[0]):
        row = torch.zeros(())
        count = 0
        for t in range(logp.shape[1]):
            if mask[i, t] == 0:
                continue
            ratio = torch.exp(logp[i, t] - old[i, t])
            surrogate = torch.minimum(ratio * adv[i], torch.clamp(ratio, 1 - eps, 1 + eps_high) * adv[i])
            r = torch.exp(ref[i, t] - logp[i, t])
            term = -(surrogate - beta * (r - torch.log(r) - 1))
            row = row + term
            total = total + term
            count += 1
            n_tokens += 1
        rows.append(row / max(count, 1))
    if loss_type == "grpo":
        return torch.stack(rows).mean()
    if loss_type == "bnpo":
        return total / n_tokens
    if loss_type == "dr_grpo":
        return total / (logp.shape[0] * max_len)
    return total / batch_tokens


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_loss_equals_slow_reference_loop_value_and_gradient(loss_type: str, beta: float) -> None:
    gen = torch.Generator().manual_seed(3)
    old = torch.log(torch.rand(3, 5, generator=gen) * 0.9 + 0.05)
    logp = (old + 0.3 * torch.randn(3, 5, generator=gen)).clamp(max=0).requires_grad_(True)
    ref = old + 0.2 * torch.randn(3, 5, generator=gen)
    adv = _t([1.2, -0.7, 0.4])
    mask = _t([1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0]).reshape(3, 5)
    batch_tokens = 20.0  # as if another micro-batch held 10 more tokens
    fast = grpo_loss(
        logp,
        old,
        adv,
        mask,
        loss_type=loss_type,  # type: ignore[arg-type]
        epsilon=0.2,
        epsilon_high=0.28,
        beta=beta,
        ref_logp=ref,
        max_completion_length=7,
        num_items_in_batch=batch_tokens,
    )
    (grad_fast,) = torch.autograd.grad(fast.loss, logp)
    slow = _slow_reference_loss(logp, old, ref, adv, mask, loss_type, 0.2, 0.28, beta, 7, batch_tokens)
    (grad_slow,) = torch.autograd.grad(slow, logp)
    assert fast.loss.item() == pytest.approx(slow.item(), abs=1e-6)
    torch.testing.assert_close(grad_fast, grad_slow, atol=1e-6, rtol=1e-5)
    assert (fast.kl.item() > 0) == (beta > 0)


def test_kl_is_zero_when_policy_equals_reference() -> None:
    logp = torch.log(torch.rand(2, 4) * 0.9 + 0.05)
    out = grpo_loss(
        logp,
        logp,
        _t([1.0, -1.0]),
        torch.ones(2, 4),
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=None,
        beta=0.1,
        ref_logp=logp.clone(),
        max_completion_length=4,
    )
    assert out.kl.item() == 0.0
    assert out.loss.item() == pytest.approx(out.policy_loss.item(), abs=0)


def test_beta_without_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(
            torch.zeros(1, 1),
            torch.zeros(1, 1),
            _t([1.0]),
            torch.ones(1, 1),
            loss_type="grpo",
            epsilon=0.2,
            epsilon_high=None,
            beta=0.1,
            ref_logp=None,
            max_completion_length=1,
        )


# ------------------------------------------------------------------------------------------- log-probs and entropy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_log_probs_match_log_softmax_gather(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 11, generator=gen).to(dtype)
    tokens = torch.randint(0, 11, (2, 3), generator=gen)
    expected = torch.log_softmax(logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(token_log_probs(logits, tokens), expected, atol=1e-5, rtol=1e-5)


def test_entropy_hand_computed() -> None:
    uniform = torch.zeros(1, 1, 4)  # log 4 nats
    peaked = torch.tensor([[[0.0, -1e4, -1e4, -1e4]]])  # one sure token: 0 nats
    assert entropy_from_logits(uniform).item() == pytest.approx(math.log(4))
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)


# old - sampling = [0.5, -1.0, (padding)]; the sequence sums to -0.5.
_OLD = torch.tensor([[-1.0, -2.0, -0.5]])
_SAMPLED = torch.tensor([[-1.5, -1.0, -3.0]])
_MASK = torch.tensor([[1.0, 1.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "cap", "expected"),
    [
        ("token_truncate", 1.5, [[1.5, math.exp(-1.0), 1.0]]),  # exp(0.5) = 1.65 truncated to the cap
        ("token_mask", 1.5, [[0.0, math.exp(-1.0), 1.0]]),  # ... or masked to 0
        ("token_truncate", 3.0, [[math.exp(0.5), math.exp(-1.0), 1.0]]),  # under the cap: the ratio itself
        ("sequence_truncate", 1.5, [[math.exp(-0.5)]]),  # one ratio per completion, padding left out
        ("sequence_truncate", 0.5, [[0.5]]),
        ("sequence_mask", 0.5, [[0.0]]),
    ],
)
def test_sampler_importance_weights_hand_computed(mode: str, cap: float, expected: list[list[float]]) -> None:
    w = sampler_importance_weights(_OLD, _SAMPLED, _MASK, mode=mode, cap=cap)  # type: ignore[arg-type]
    torch.testing.assert_close(w, torch.tensor(expected))


def test_sampler_importance_weights_refuse_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        sampler_importance_weights(_OLD, _SAMPLED, _MASK, mode="token", cap=2.0)  # type: ignore[arg-type]


def test_importance_weights_scale_the_surrogate_but_not_the_kl() -> None:
    logp = torch.zeros(1, 3, requires_grad=True)  # ratio 1 everywhere: the surrogate of a token is -A
    ref = logp.detach() + 0.1  # k3 KL per token: e^0.1 - 0.1 - 1
    kl = math.exp(0.1) - 0.1 - 1
    out = grpo_loss(
        logp,
        logp.detach(),
        torch.tensor([1.0]),
        _MASK,
        loss_type="bnpo",
        epsilon=0.2,
        epsilon_high=None,
        beta=0.1,
        ref_logp=ref,
        max_completion_length=3,
        importance_weights=torch.tensor([[2.0, 0.5, 7.0]]),  # the padding's 7 must not count
    )
    # bnpo: token mean over the 2 completion tokens of (-A * w + beta * kl).
    assert out.loss.item() == pytest.approx((-2.0 - 0.5) / 2 + 0.1 * kl, abs=1e-6)
    assert out.policy_loss.item() == pytest.approx(-1.25, abs=1e-6)
