"""Entropy control and zero-advantage masking (issue 22): ``top_entropy_quantile``, ``policy/entropy_trained``,
``mask_zero_advantage_groups`` and the ``entropy_coeff`` bonus, on hand-made tensors and through the loop. Equality
of the entropy mask and the loss with TRL's own code is in ``tests/integrations/test_algorithms_trl.py``; of the
bonus with verl's ``agg_loss`` and of KL-Cov/Clip-Cov with verl's losses in ``test_algorithms_verl.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.test_train import _config
from trainer.algorithms.advantages import zero_advantage_groups
from trainer.algorithms.entropy import high_entropy_mask, pad_for_gather
from trainer.algorithms.losses import PolicyOptions, grpo_loss
from trainer.config import ConfigError
from trainer.stand_in import StandInServer
from trainer.train import train

ENTROPY = torch.tensor([[0.1, 0.5, 0.9, 0.3], [0.7, 0.2, 9.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])


def test_the_mask_keeps_the_top_share_of_counted_tokens_by_hand() -> None:
    # counted entropies sorted: 0.1 0.2 0.3 0.5 0.7 0.9; the 0.5 quantile interpolates 0.3 and 0.5: 0.4.
    # The padded 9.0 is neither counted in the threshold nor kept.
    got = high_entropy_mask(ENTROPY, MASK, 0.5)
    assert got.tolist() == [[False, True, True, False], [True, False, False, False]]
    # 1/3 kept: the 2/3 quantile sits at position 10/3 of 0..5 in the sorted list: 0.5 + (0.7 - 0.5) / 3 = 0.567
    assert high_entropy_mask(ENTROPY, MASK, 1 / 3).tolist() == [
        [False, False, True, False],
        [True, False, False, False],
    ]
    assert high_entropy_mask(ENTROPY, MASK, 1.0).tolist() == MASK.bool().tolist()
    assert high_entropy_mask(ENTROPY, torch.zeros_like(MASK), 0.5).sum() == 0  # nothing counted: nothing kept


def test_the_threshold_is_over_every_rank_and_padding_is_dropped() -> None:
    # another rank holds 1.0 and 2.0: the gathered median of 0.1 0.2 0.3 0.5 0.7 0.9 1.0 2.0 is 0.6
    other = torch.tensor([1.0, 2.0])

    def gather(local: torch.Tensor) -> torch.Tensor:
        length = max(local.numel(), other.numel())
        return torch.cat([pad_for_gather(local, length), pad_for_gather(other, length)])

    got = high_entropy_mask(ENTROPY, MASK, 0.5, gather)
    assert got.tolist() == [[False, False, True, False], [True, False, False, False]]


@pytest.mark.parametrize("quantile", [-0.1, 1.5])
def test_a_quantile_outside_0_1_is_refused(quantile: float) -> None:
    with pytest.raises(ValueError, match="top_entropy_quantile"):
        high_entropy_mask(ENTROPY, MASK, quantile)


def test_the_config_names_the_field(tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="top_entropy_quantile"):
        _config(tiny_model_dir, prompt_files, tmp_path, top_entropy_quantile=1.5)


def _loss_grad(token_mask: torch.Tensor | None, beta: float, mask: torch.Tensor) -> torch.Tensor:
    theta = torch.full((2, 4), -1.0, dtype=torch.float64, requires_grad=True)
    logp = -torch.nn.functional.softplus(-theta)  # (2, 4)
    out = grpo_loss(
        logp,
        logp.detach(),
        torch.tensor([1.0, -1.0], dtype=torch.float64),
        mask,
        loss_type="bnpo",
        epsilon=0.2,
        epsilon_high=None,
        beta=beta,
        ref_logp=logp.detach() - 0.3,
        max_completion_length=4,
        options=PolicyOptions(),
        token_mask=token_mask,
    )
    (grad,) = torch.autograd.grad(out.loss, theta)
    return grad


def test_tokens_out_of_the_entropy_mask_get_no_policy_gradient_but_keep_the_kl() -> None:
    mask = MASK.double()
    keep = high_entropy_mask(ENTROPY, MASK, 0.5)
    grad = _loss_grad(keep, 0.0, mask)
    assert torch.equal(grad[~keep], torch.zeros(int((~keep).sum()), dtype=torch.float64))
    # bnpo divides by the 6 counted tokens, not the 3 kept. logp = log sigmoid(theta), so at ratio 1 the
    # gradient of -A * ratio is -A * dlogp/dtheta = -A * sigmoid(-theta) = -A * sigmoid(1) at theta = -1.
    slope = torch.sigmoid(torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(grad[0, 1], -slope / 6, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad[1, 0], slope / 6, rtol=1e-6, atol=0)
    with_kl = _loss_grad(keep, 0.1, mask)
    dropped = ~keep & MASK.bool()
    assert (with_kl[dropped] != 0).all()  # TRL's order: the KL is added after the entropy mask


def test_zero_advantage_groups_by_hand() -> None:
    advantages = torch.tensor([0.0, 0.0, 1.0, -1.0, 0.5, 0.0, 0.0, -0.5])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    assert zero_advantage_groups(advantages, groups).tolist() == [True, True] + [False] * 6
    per_token = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.2], [0.0, 0.0]])
    assert zero_advantage_groups(per_token, torch.tensor([5, 5, 9, 9])).tolist() == [True, True, False, False]


@pytest.mark.parametrize("masked", [False, True])
def test_rows_of_zero_advantage_groups_draw_no_kl_gradient_when_masked(masked: bool) -> None:
    """Group 0 (rows 0-1) has advantages 0; group 1 (rows 2-3) +-1. The loop drops the masked group's rows from the
    loss mask (``compute_advantages``); with ``beta > 0`` their gradient is then exactly 0, else the KL's alone:
    ``beta * d k3 / d logp = beta * (1 - exp(ref - logp)) / |y| / B`` under ``grpo``."""
    advantages = torch.tensor([0.0, 0.0, 1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(4, 2, dtype=torch.float64)
    if masked:
        mask[zero_advantage_groups(advantages, torch.tensor([0, 0, 1, 1]))] = 0
    logp = torch.full((4, 2), -1.0, dtype=torch.float64, requires_grad=True)
    out = grpo_loss(
        logp,
        logp.detach(),
        advantages,
        mask,
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=None,
        beta=0.1,
        ref_logp=logp.detach() - 0.3,
        max_completion_length=2,
        num_completions_in_batch=int((mask.sum(-1) > 0).sum()),
    )
    (grad,) = torch.autograd.grad(out.loss, logp)
    kl_slope = 0.1 * (1 - torch.exp(torch.tensor(-0.3, dtype=torch.float64)))  # beta * d k3 / d logp
    if masked:
        assert torch.equal(grad[:2], torch.zeros(2, 2, dtype=torch.float64))
        torch.testing.assert_close(grad[2], (-1.0 + kl_slope).expand(2) / 2 / 2)  # 2 tokens, 2 counted rows
    else:
        torch.testing.assert_close(grad[:2], kl_slope.expand(2, 2) / 2 / 4)  # 2 tokens, 4 counted rows
        assert (grad[:2] != 0).all()


def test_masking_zero_advantage_groups_removes_their_kl_gradient(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """Step 1's rewards differ, so the policy leaves the reference; step 2's are all equal, so every group has zero
    spread and zero advantage. With beta > 0 the KL alone still draws gradient in step 2; with the option, none."""

    def scorer() -> object:
        seen = [0]

        def reward(item: dict) -> float:
            seen[0] += 1
            return float(seen[0] % 2) if seen[0] <= 8 else 1.0  # step 1: 2 prompts x 4 completions

        return StandInServer(reward).scorer()

    kw = {"max_steps": 2, "beta": 0.1}
    kl = train(_config(tiny_model_dir, prompt_files, tmp_path / "kl", **kw), scorer=scorer())
    masked = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "masked", mask_zero_advantage_groups=True, **kw),
        scorer=scorer(),
    )
    for run in (kl, masked):
        assert run.history[0]["adv/frac_zero_std_groups"] == 0.0 and run.history[0]["optim/grad_norm"] > 0
        assert run.history[1]["adv/frac_zero_std_groups"] == 1.0
    assert kl.history[1]["loss/kl"] > 0 and kl.history[1]["optim/grad_norm"] > 0
    assert masked.history[1]["optim/grad_norm"] == 0.0


def test_the_loop_logs_the_entropy_of_the_trained_tokens(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """With the top 30% of tokens by entropy trained on, their mean entropy is above the mean of all tokens."""
    result = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1, top_entropy_quantile=0.3),
        scorer=StandInServer(lambda item: float(len(item["response"]) % 2)).scorer(),
    )
    row = result.history[0]
    assert row["policy/entropy_trained"] > row["policy/entropy"] > 0
    full = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "full", max_steps=1),
        scorer=StandInServer(lambda item: float(len(item["response"]) % 2)).scorer(),
    )
    assert full.history[0]["policy/entropy_trained"] == full.history[0]["policy/entropy"]


def test_kl_cov_penalises_the_highest_covariance_token_by_hand() -> None:
    """Advantages 1 and -1, log-probs [[-1, -2], [-3, -4.5]] (mean -2.625): covariances 1.625, 0.625, 0.375, 1.875,
    so a quarter of the 4 tokens is (1, 1). Every log-ratio is -0.1: that token's loss gains ``coef * 0.1`` and its
    gradient ``-coef`` (d|x|/dx at x < 0); the others are the unclipped ``-A * rho``, averaged over 4 tokens."""
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.5]], dtype=torch.float64, requires_grad=True)
    old = logp.detach() + 0.1
    mask = torch.ones(2, 2, dtype=torch.float64)
    options = PolicyOptions(kl_cov_ratio=0.25, ppo_kl_coef=0.5)
    out = grpo_loss(
        logp,
        old,
        torch.tensor([1.0, -1.0], dtype=torch.float64),
        mask,
        loss_type="kl_cov",
        epsilon=0.2,
        epsilon_high=None,
        beta=0.0,
        ref_logp=None,
        max_completion_length=2,
        num_items_in_batch=4,
        options=options,
    )
    rho = torch.exp(torch.tensor(-0.1, dtype=torch.float64))
    torch.testing.assert_close(out.loss, (-2 * rho + 2 * rho + 0.5 * 0.1) / 4)
    (grad,) = torch.autograd.grad(out.loss, logp)
    expected = torch.stack([-rho, -rho, rho, rho - 0.5]).reshape(2, 2) / 4
    torch.testing.assert_close(grad, expected)
    assert out.clip_ratio == 0.25  # the penalised share


# ------------------------------------------------------------------------------------------------- entropy bonus

#: Rows of 3 and 1 counted tokens; the padded 9.0 must weigh nothing. Counted sum 5.0, row means 1.0 and 2.0.
BONUS_ENTROPY = [[0.5, 1.0, 1.5], [2.0, 9.0, 0.0]]
BONUS_MASK = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.float64)


def _bonus(loss_type: str, coeff: float, token_mask: torch.Tensor | None = None) -> tuple[float, torch.Tensor]:
    """The loss and its gradient in the entropies, with zero advantages and ratio 1 (so the policy term is 0)."""
    entropy = torch.tensor(BONUS_ENTROPY, dtype=torch.float64, requires_grad=True)
    logp = torch.full((2, 3), -1.0, dtype=torch.float64)
    out = grpo_loss(
        logp,
        logp,
        torch.zeros(2, dtype=torch.float64),
        BONUS_MASK,
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=None,
        beta=0.0,
        ref_logp=None,
        max_completion_length=3,
        num_items_in_batch=4,
        options=PolicyOptions(entropy_coeff=coeff),
        token_mask=token_mask,
        entropy=entropy,
    )
    assert float(out.policy_loss) == 0.0  # the bonus is not part of the logged policy loss
    if not out.loss.requires_grad:  # a zero coefficient leaves the entropies out of the graph
        return float(out.loss), torch.zeros_like(entropy)
    (grad,) = torch.autograd.grad(out.loss, entropy)
    return float(out.loss.detach()), grad


@pytest.mark.parametrize(
    ("loss_type", "loss", "grad"),
    [
        # token mean over the 4 counted tokens: -0.1 * 5 / 4; each counted token -0.1 / 4
        ("bnpo", -0.125, [[-0.025] * 3, [-0.025, 0, 0]]),
        ("dapo", -0.125, [[-0.025] * 3, [-0.025, 0, 0]]),
        # mean over 2 completions of the row means 1.0 and 2.0: -0.1 * 1.5; row 0's tokens -0.1 / (3 * 2)
        ("grpo", -0.15, [[-0.1 / 6] * 3, [-0.05, 0, 0]]),
        # sum over 2 completions x 3 tokens: -0.1 * 5 / 6
        ("dr_grpo", -0.5 / 6, [[-0.1 / 6] * 3, [-0.1 / 6, 0, 0]]),
        # each completion's sum, averaged over 2: -0.1 * 5 / 2
        ("luspo", -0.25, [[-0.05] * 3, [-0.05, 0, 0]]),
    ],
)
def test_the_entropy_bonus_is_aggregated_as_the_loss_by_hand(
    loss_type: str, loss: float, grad: list[list[float]]
) -> None:
    got_loss, got_grad = _bonus(loss_type, 0.1)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    torch.testing.assert_close(got_grad, torch.tensor(grad, dtype=torch.float64), rtol=1e-12, atol=0)


def test_the_bonus_acts_on_the_trained_tokens_with_the_losss_denominator() -> None:
    keep = torch.tensor([[False, False, True], [True, False, False]])
    loss, grad = _bonus("bnpo", 0.1, keep)
    assert loss == pytest.approx(-0.1 * (1.5 + 2.0) / 4, rel=1e-12)  # the kept 1.5 and 2.0, over the 4 counted
    torch.testing.assert_close(grad, torch.tensor([[0, 0, -0.025], [-0.025, 0, 0]], dtype=torch.float64))


def test_a_zero_coefficient_is_off_and_a_bonus_without_entropies_is_refused() -> None:
    loss, grad = _bonus("bnpo", 0.0)
    assert loss == 0.0 and not grad.any()
    logp = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="entropy_coeff"):
        grpo_loss(
            logp,
            logp,
            torch.zeros(2, dtype=torch.float64),
            BONUS_MASK,
            loss_type="bnpo",
            epsilon=0.2,
            epsilon_high=None,
            beta=0.0,
            ref_logp=None,
            max_completion_length=3,
            options=PolicyOptions(entropy_coeff=0.1),
        )


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_the_config_refuses_a_non_finite_coefficient(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, value: float
) -> None:
    with pytest.raises(ConfigError, match="entropy_coeff"):
        _config(tiny_model_dir, prompt_files, tmp_path, entropy_coeff=value)


@pytest.mark.parametrize("chunk", [None, 5])
def test_the_bonus_alone_moves_the_policy_through_the_loop(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, chunk: int | None
) -> None:
    """Every reward equal: zero advantages, no policy gradient. With the bonus the entropy's own gradient is left,
    through the full logits and through the chunked LM head alike."""
    kw = {"max_steps": 1, "logprobs_chunk_tokens": chunk}
    equal = StandInServer(lambda item: 1.0)
    plain = train(_config(tiny_model_dir, prompt_files, tmp_path / "plain", **kw), scorer=equal.scorer())
    bonus = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "bonus", entropy_coeff=0.01, **kw), scorer=equal.scorer()
    )
    assert plain.history[0]["optim/grad_norm"] == 0.0
    assert bonus.history[0]["optim/grad_norm"] > 0.0
    assert bonus.history[0]["policy/entropy"] == pytest.approx(plain.history[0]["policy/entropy"], rel=1e-5)
