"""GRPO math against hand-computed tensors and a slow reference loop."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from trainer.algorithms.advantages import ADVANTAGE_EPS, frac_zero_std_groups, group_advantages, process_advantages
from trainer.algorithms.logprobs import OUTSIDE_SUPPORT_LOGP, entropy_from_logits, sampling_support, token_log_probs
from trainer.algorithms.losses import aggregate_loss, clipped_surrogate, grpo_loss, kl_k3
from trainer.rollout.correction import sampler_importance_weights

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


# ------------------------------------------------------------------------------------- process supervision


def test_process_advantages_of_the_docstring_example() -> None:
    # One group. Completion 0: steps [1, 0] ending at tokens 1 and 3; completion 1: step [1] ending at token 2.
    # The group's steps [1, 0, 1]: mean 2/3, unbiased std sqrt(((1/3)^2 * 2 + (2/3)^2) / 2) = sqrt(1/3).
    rewards = _t([1, 0, 1, NAN]).reshape(2, 2)
    ends = _ids([1, 3, 2, -1]).reshape(2, 2)
    adv = process_advantages(rewards, ends, _ids([0, 0]), 5, eps=0.0)
    hi, lo = (1 / 3) / SQRT_THIRD, (-2 / 3) / SQRT_THIRD  # +0.577, -1.155
    # A token's advantage sums the normalised rewards of the steps that end at or after it.
    expected = [[hi + lo, hi + lo, lo, lo, 0.0], [hi, hi, hi, 0.0, 0.0]]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-6, rtol=0)
    assert adv[0, 0].item() == pytest.approx(-0.577, abs=1e-3)


def test_process_advantages_normalise_over_the_group_not_the_batch() -> None:
    # Two groups, interleaved. Group 5: steps [2] and [0, 4] (mean 2, std 2); group 9: steps [1] and [3]
    # (mean 2, std sqrt(2)). Each step ends at its own token; T = 2.
    rewards = _t([2, NAN, 1, NAN, 0, 4, 3, NAN]).reshape(4, 2)
    ends = _ids([1, 0, 0, 0, 0, 1, 1, 0]).reshape(4, 2)
    adv = process_advantages(rewards, ends, _ids([5, 9, 5, 9]), 2)
    g5, g9 = 2 + ADVANTAGE_EPS, math.sqrt(2) + ADVANTAGE_EPS
    expected = [[0.0, 0.0], [-1 / g9, 0.0], [(-2 + 2) / g5, 2 / g5], [1 / g9, 1 / g9]]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-6, rtol=0)
    # Dr. GRPO's "none" only centres: group 5's steps become [0], [-2, 2].
    centred = process_advantages(rewards, ends, _ids([5, 9, 5, 9]), 2, scale_rewards="none")
    torch.testing.assert_close(centred[2], torch.tensor([0.0, 2.0]))


def test_one_step_per_completion_ending_at_its_last_token_is_outcome_supervision() -> None:
    outcome = _t([1, 0, 0, 1, 0.5, 0.5, 0.0, 2.0])
    groups = _ids([0, 0, 0, 0, 1, 1, 1, 1])
    lengths = _ids([3, 5, 1, 4, 2, 5, 5, 3])
    adv = process_advantages(outcome.unsqueeze(1), (lengths - 1).unsqueeze(1), groups, 5)
    per_completion = group_advantages(outcome, groups)
    positions = torch.arange(5).expand(8, 5)
    expected = torch.where(positions < lengths.unsqueeze(1), per_completion.unsqueeze(1), torch.zeros(()))
    torch.testing.assert_close(adv, expected)


def test_a_completion_without_scored_steps_gets_zero_and_changes_nothing_for_the_others() -> None:
    rewards = _t([1, 0, NAN, NAN, 0, 1]).reshape(3, 2)
    ends = _ids([0, 1, 0, 1, 0, 1]).reshape(3, 2)
    adv = process_advantages(rewards, ends, _ids([0, 0, 0]), 3)
    assert adv[1].tolist() == [0.0, 0.0, 0.0]
    without = process_advantages(rewards[[0, 2]], ends[[0, 2]], _ids([0, 0]), 3)
    torch.testing.assert_close(adv[[0, 2]], without)


def test_process_advantages_refuse_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(N, S\)"):
        process_advantages(_t([1.0, 2.0]), _ids([0, 1]), _ids([0, 0]), 3)


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


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_completions_outside_the_mask_do_not_dilute_the_others(loss_type: str) -> None:
    # Row 1 is not trained on (a null reward): the loss must equal that of the batch without it, as long as the
    # caller counts only the rows that are trained on.
    per_token = _t([1, 2, 3, 7, 7, 7, 4, 5, 9]).reshape(3, 3)
    mask = _t([1, 1, 1, 0, 0, 0, 1, 1, 0]).reshape(3, 3)
    kw = {"max_completion_length": 3, "num_items_in_batch": mask.sum()}
    got = aggregate_loss(per_token, mask, loss_type, num_completions_in_batch=2, **kw)  # type: ignore[arg-type]
    keep = [0, 2]
    alone = aggregate_loss(per_token[keep], mask[keep], loss_type, **kw)  # type: ignore[arg-type]
    assert got.item() == pytest.approx(alone.item())
    assert got.item() == pytest.approx(
        {"grpo": (2 + 4.5) / 2, "bnpo": 15 / 5, "dr_grpo": 15 / 6, "dapo": 15 / 5}[loss_type]
    )


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_micro_batches_sum_to_the_batch_loss_with_rows_left_out(loss_type: str) -> None:
    gen = torch.Generator().manual_seed(1)
    per_token = torch.randn(4, 5, generator=gen)
    mask = torch.ones(4, 5)
    mask[1] = 0  # a null reward in the first micro-batch only
    kw: dict[str, Any] = {"max_completion_length": 5, "num_items_in_batch": mask.sum(), "num_completions_in_batch": 3}
    whole = aggregate_loss(per_token, mask, loss_type, **kw)  # type: ignore[arg-type]
    first, second = (
        aggregate_loss(per_token[i : i + 2], mask[i : i + 2], loss_type, gradient_accumulation_steps=2, **kw)  # type: ignore[arg-type]
        for i in (0, 2)
    )
    halves = float(first + second)
    assert float(halves) == pytest.approx(whole.item(), abs=1e-6)


def _loss_and_grad(
    logp: torch.Tensor, old: torch.Tensor, adv: list[float], mask: torch.Tensor, **kw: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss and its gradient in ``logp``, with the old policy as the reference (``beta`` 0.04 unless given)."""
    logp = logp.clone().requires_grad_(True)
    out = grpo_loss(
        logp,
        old,
        _t(adv),
        mask,
        epsilon=0.2,
        epsilon_high=None,
        ref_logp=kw.pop("ref_logp", old),
        max_completion_length=mask.shape[1],
        **{"beta": 0.04, "loss_type": "dapo", "num_items_in_batch": mask.sum(), **kw},
    )
    (grad,) = torch.autograd.grad(out.loss, logp)
    return out.loss, grad


def test_a_row_outside_the_mask_gets_no_kl_gradient() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.1, 0.2]]))
    ref = torch.log(torch.tensor([[0.4, 0.3], [0.6, 0.7]]))
    mask = _t([1, 1, 0, 0]).reshape(2, 2)
    _, grad = _loss_and_grad(logp, logp, [0.0, 0.0], mask, ref_logp=ref, loss_type="grpo", num_completions_in_batch=1)
    assert grad[1].tolist() == [0.0, 0.0]
    assert grad[0].abs().sum() > 0


@pytest.mark.parametrize("gap", [100.0, -100.0, math.inf, -math.inf])
def test_a_huge_log_ratio_at_a_padding_position_gives_finite_gradients(gap: float) -> None:
    # exp(89) overflows float32, and inf * 0 (the mask) would be NaN in the loss and in every gradient.
    old = torch.log(_t([0.5, 0.5, 0.5])).reshape(1, 3)
    logp = old.clone()
    logp[0, 2] = -1.0 if math.isinf(gap) else old[0, 2] + gap
    old_padded = old.clone()
    if math.isinf(gap):
        old_padded[0, 2] = -1.0 - gap  # so logp - old is +-inf
    mask = _t([1, 1, 0]).reshape(1, 3)
    loss, grad = _loss_and_grad(logp, old_padded, [1.0], mask, num_items_in_batch=2)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert grad[0, 2].item() == 0.0
    # The real tokens' gradient is what it is without the padding position.
    _, grad_without = _loss_and_grad(old[:, :2], old[:, :2], [1.0], mask[:, :2], num_items_in_batch=2)
    torch.testing.assert_close(grad[:, :2], grad_without)


def test_per_token_advantages_in_the_surrogate() -> None:
    logp = torch.zeros(1, 3)
    per_token, _ = clipped_surrogate(logp, logp, _t([1.0, -2.0, 0.5]).reshape(1, 3), 0.2)
    assert per_token.tolist() == [[-1.0, 2.0, -0.5]]


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


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.7), (3, 1.0), (3, 0.5), (1, 1.0), (0, 0.999), (20, 0.3)])
def test_sampling_support_is_what_transformers_samples_from(top_k: int, top_p: float) -> None:
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 11, generator=gen) * 2
    logits[0, :3] = 1.5  # ties at the k-th value
    scores = logits.clone()
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    support = sampling_support(logits, top_k, top_p)
    assert support is not None
    assert torch.equal(support, torch.isfinite(scores))


def test_truncated_log_probs_are_those_of_the_renormalised_distribution() -> None:
    logits = torch.log(_t([0.5, 0.3, 0.15, 0.05])).reshape(1, 1, 4)
    support = sampling_support(logits, top_p=0.75)  # keeps 0.5 and 0.3 (0.5 alone is short of 0.75)
    assert support is not None and support.tolist() == [[[True, True, False, False]]]
    got = token_log_probs(logits.expand(1, 4, 4), torch.tensor([[0, 1, 2, 3]]), support.expand(1, 4, 4))
    assert got[0, :2].tolist() == pytest.approx([math.log(0.5 / 0.8), math.log(0.3 / 0.8)], abs=1e-6)
    assert got[0, 2:].tolist() == [OUTSIDE_SUPPORT_LOGP, OUTSIDE_SUPPORT_LOGP]  # finite: no NaN in a log-ratio
    assert sampling_support(logits, 0, 1.0) is None  # no truncation: the full softmax


def test_truncated_log_probs_give_finite_gradients_outside_the_support() -> None:
    logits = torch.log(_t([0.5, 0.3, 0.15, 0.05])).reshape(1, 1, 4).expand(1, 2, 4).clone().requires_grad_(True)
    support = sampling_support(logits, top_k=2)
    logp = token_log_probs(logits, torch.tensor([[0, 3]]), support)  # token 3 is outside the top 2
    per_token, _ = clipped_surrogate(logp, logp.detach(), _t([1.0]), 0.2)
    (per_token.sum() + kl_k3(logp, logp.detach() - 0.5).sum()).backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert logits.grad[0, 1].abs().sum() == 0  # nothing flows through a token the sampler could not draw


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
