"""The objectives and estimators of issue 22 against hand-computed values, in the main environment.

Their equality with verl's ``core_algos`` and TRL's ``GRPOTrainer._compute_loss`` is tested against the installed
packages in ``tests/integrations/test_algorithms_{verl,trl}.py``; here each one's equation is checked by hand, and
the estimators through :func:`trainer.train.compute_advantages` (the stand-in run of ``test_registries``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.test_registries import _config, _step
from tests.trainer.test_train import _config as _run_config
from trainer.algorithms.advantages import reinforce_plus_plus_advantages, rloo_advantages, token_whiten
from trainer.algorithms.losses import PolicyOptions, grpo_loss, log_importance_weights, off_policy_mask
from trainer.config import ConfigError
from trainer.stand_in import StandInServer
from trainer.train import train

NAN = math.nan


def _t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


# ------------------------------------------------------------------------------------------------------ estimators


def test_rloo_is_the_reward_minus_the_mean_of_the_others() -> None:
    got = rloo_advantages(_t([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 2.0, 0.0]), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    # group 1: 3 - (1 + 2 + 0) / 3 = 2, 1 - 5 / 3, 2 - 4 / 3, 0 - 2
    expected = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, 1 - 5 / 3, 2 - 4 / 3, -2.0]
    torch.testing.assert_close(got, _t(expected))


def test_rloo_leaves_a_null_out_of_the_baseline_and_a_lone_member_keeps_its_reward() -> None:
    got = rloo_advantages(_t([1.0, NAN, 0.0, 0.5, NAN, 0.7]), torch.tensor([0, 0, 0, 1, 1, 2]))
    # group 0 is [1, 0]: 1 - 0 and 0 - 1; group 1 keeps one member (verl's baseline 0); group 2 is alone
    torch.testing.assert_close(got, _t([1.0, 0.0, -1.0, 0.5, 0.0, 0.7]))


def test_rloo_gives_exactly_zero_to_equal_non_dyadic_rewards() -> None:
    got = rloo_advantages(_t([0.1, 0.1, 0.1]), torch.tensor([0, 0, 0]))
    assert got.tolist() == [0.0, 0.0, 0.0]


def test_token_whitening_weighs_each_completion_by_its_tokens() -> None:
    # values [1, 0] on 3 and 1 tokens: mean 3/4, unbiased token variance (3 * 1/16 + 9/16) / 3 = 1/4
    got = token_whiten(torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([3, 1]))
    torch.testing.assert_close(got, torch.tensor([0.25, -0.75], dtype=torch.float64) / math.sqrt(0.25 + 1e-8))


def test_reinforce_plus_plus_whitens_over_the_batch_and_skips_nulls() -> None:
    got = reinforce_plus_plus_advantages(_t([1.0, NAN, 0.0]), torch.tensor([3, 5, 1]))
    scale = math.sqrt(0.25 + 1e-8)
    torch.testing.assert_close(got, _t([0.25 / scale, 0.0, -0.75 / scale]))


def test_reinforce_plus_plus_baseline_centres_on_the_group_first() -> None:
    # groups [3, 1] -> [1, -1] and [5, 5] -> [0, 0]; on 1 token each: mean 0, unbiased variance 2/3
    got = reinforce_plus_plus_advantages(_t([3.0, 1.0, 5.0, 5.0]), torch.ones(4), torch.tensor([0, 0, 1, 1]))
    scale = math.sqrt(2 / 3 + 1e-8)
    torch.testing.assert_close(got, _t([1 / scale, -1 / scale, 0.0, 0.0]))


@pytest.mark.parametrize("name", ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_the_loop_trains_on_scoreable_completions_only(name: str) -> None:
    adv = _step([1.0, None, 0.0, 1.0], _config(advantage_estimator=name, num_generations=4))
    assert adv.advantages[1].item() == 0.0
    assert adv.loss_mask.sum(-1).tolist() == [5, 0, 5, 5]


def test_the_loop_whitens_over_the_tokens_it_trains_on() -> None:
    adv = _step([1.0, 0.0, 0.0, 1.0], _config(advantage_estimator="reinforce_plus_plus", num_generations=4))
    expected = reinforce_plus_plus_advantages(_t([1.0, 0.0, 0.0, 1.0]), torch.full((4,), 5))
    torch.testing.assert_close(adv.advantages, expected)


# ------------------------------------------------------------------------------------------------------ objectives


def _loss(loss_type: str, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, **kw: Any) -> torch.Tensor:
    options = PolicyOptions(**{k: kw.pop(k) for k in list(kw) if k in PolicyOptions.__dataclass_fields__})
    mask = kw.pop("mask", torch.ones_like(logp))
    out = grpo_loss(
        logp,
        old,
        adv,
        mask,
        loss_type=loss_type,
        epsilon=kw.pop("epsilon", 0.2),
        epsilon_high=kw.pop("epsilon_high", None),
        beta=0.0,
        ref_logp=None,
        max_completion_length=logp.shape[1],
        num_items_in_batch=mask.sum(),
        options=options,
        **kw,
    )
    return out.loss


def test_the_sequence_ratio_is_the_geometric_mean_of_the_token_ratios() -> None:
    logp = torch.log(_t([[1.0, 1.0, 1.0]]))
    old = torch.log(_t([[0.5, 2.0, 1.0]])) + logp
    mask = _t([[1.0, 1.0, 0.0]])
    got = log_importance_weights(logp, old, mask, "sequence")
    torch.testing.assert_close(got, _t([[-(math.log(0.5) + math.log(2.0)) / 2]]))  # exp: (2 * 0.5)^(1/2) = 1


def test_gspo_token_has_the_sequence_value_and_each_tokens_own_gradient() -> None:
    logp = _t([[-1.0, -2.0]]).requires_grad_()
    old = _t([[-1.5, -2.1]])
    w = log_importance_weights(logp, old, torch.ones(1, 2), "sequence_token")
    torch.testing.assert_close(w.detach(), torch.full((1, 2), 0.3))  # mean of 0.5 and 0.1
    (grad,) = torch.autograd.grad((torch.exp(w) * _t([[1.0, 0.0]])).sum(), logp)
    torch.testing.assert_close(grad, _t([[math.exp(0.3), 0.0]]))  # the second token's advantage is 0: no gradient


def test_the_sequence_level_clips_whole_completions() -> None:
    # sequence ratio exp(0.5) = 1.65 > 1.2 with a positive advantage: clipped, the loss is -(1.2 * 1) per token
    logp = _t([[0.0, 0.0]]).requires_grad_()
    got = _loss("bnpo", logp, _t([[-0.5, -0.5]]), _t([1.0]), importance_sampling_level="sequence")
    assert float(got.detach()) == pytest.approx(-1.2)
    (grad,) = torch.autograd.grad(got, logp)
    assert grad.abs().sum() == 0


def test_two_sided_clipping_bounds_the_ratio_for_negative_advantages() -> None:
    logp = _t([[math.log(3.0), math.log(3.0)]])
    old = torch.zeros(1, 2)
    assert float(_loss("bnpo", logp, old, _t([-1.0]))) == pytest.approx(3.0)  # -min(-3, -1.2): the ratio itself
    assert float(_loss("bnpo", logp, old, _t([-1.0]), delta=2.0)) == pytest.approx(2.0)  # bounded by delta
    assert float(_loss("bnpo", logp, old, _t([1.0]), delta=2.0)) == pytest.approx(-1.2)  # positive: as before


def test_cispo_weighs_the_log_prob_by_the_capped_detached_ratio() -> None:
    logp = _t([[math.log(0.5), math.log(0.25)]]).requires_grad_()
    old = logp.detach() - _t([[math.log(4.0), math.log(1.5)]])  # ratios 4 and 1.5
    got = _loss("cispo", logp, old, _t([2.0]), epsilon_high=3.0)
    # -(min(4, 3) * 2 * log 0.5 + 1.5 * 2 * log 0.25) / 2 tokens
    assert float(got.detach()) == pytest.approx(-(3 * 2 * math.log(0.5) + 1.5 * 2 * math.log(0.25)) / 2, rel=1e-6)
    (grad,) = torch.autograd.grad(got, logp)
    torch.testing.assert_close(grad, _t([[-3.0, -1.5]]))  # d/dlogp: -w * A / 2, the weight detached


def test_sapo_is_a_sigmoid_gate_that_equals_the_plain_gradient_on_policy() -> None:
    logp = _t([[-1.0]]).requires_grad_()
    got = _loss("sapo", logp, logp.detach(), _t([1.0]))
    assert float(got.detach()) == pytest.approx(-2.0)  # sigmoid(0) * 4 / 1 = 2
    (grad,) = torch.autograd.grad(got, logp)
    torch.testing.assert_close(grad, _t([[-1.0]]))  # 4 sigmoid'(0) = 1: the policy gradient at ratio 1


def test_luspo_sums_each_completion_over_its_tokens() -> None:
    logp = torch.zeros(2, 3)
    mask = _t([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    got = _loss("luspo", logp, logp, _t([1.0, -1.0]), mask=mask)
    assert float(got.detach()) == pytest.approx((-3.0 + 1.0) / 2)


def test_vespo_weight_is_one_at_ratio_one_and_falls_off_both_sides() -> None:
    logp = _t([[-1.0, -1.0]]).requires_grad_()
    got = _loss("vespo", logp, logp.detach(), _t([1.0]))
    assert float(got.detach()) == pytest.approx(1.0)  # -phi(1) * A * logp averaged: -1 * 1 * -1
    far = _loss("vespo", logp, logp.detach() - 0.5, _t([1.0]))  # w = exp(1): phi = e^{3 + 2 - 3e} < 1
    assert float(far.detach()) == pytest.approx(math.exp(3 + 2 - 3 * math.e), rel=1e-5)


def test_off_policy_masking_drops_only_negative_far_completions() -> None:
    logp = torch.zeros(3, 2)
    sampling = _t([[0.5, 0.5], [0.5, 0.5], [0.01, 0.01]])
    keep = off_policy_mask(_t([[1.0], [-1.0], [-1.0]]), logp, sampling, torch.ones(3, 2), 0.1)
    assert keep.flatten().tolist() == [1.0, 0.0, 1.0]


def test_the_config_takes_trls_objective_options_and_refuses_bad_ones() -> None:
    c = _config(loss_type="cispo", epsilon_high=5.0, importance_sampling_level="sequence", delta=None)
    assert isinstance(c, PolicyOptions) and c.importance_sampling_level == "sequence"
    assert _config(delta=4, off_policy_mask_threshold=0.5).delta == 4.0  # YAML's 4 is a float here
    with pytest.raises(ConfigError, match=r"epsilon_high=None: must be set with loss_type 'cispo'.*5\.0"):
        _config(loss_type="cispo")
    with pytest.raises(ConfigError, match=r"importance_sampling_level='seq': must be one of"):
        _config(importance_sampling_level="seq")
    with pytest.raises(ConfigError, match=r"delta=0\.5: must be > 1"):
        _config(delta=0.5)
    with pytest.raises(ConfigError, match=r"sapo_temperature_neg=0\.0: must be > 0"):
        _config(sapo_temperature_neg=0.0)
    with pytest.raises(ConfigError, match=r"off_policy_mask_threshold=-1\.0"):
        _config(off_policy_mask_threshold=-1.0)


# ------------------------------------------------------------------------------------------------------- the loop


@pytest.mark.parametrize(
    "overrides",
    [
        {"importance_sampling_level": "sequence", "loss_type": "grpo"},
        {"importance_sampling_level": "sequence_token", "loss_type": "grpo"},
        {"loss_type": "cispo", "epsilon_high": 5.0},
        {"loss_type": "sapo"},
        {"loss_type": "luspo", "importance_sampling_level": "sequence"},
        {"loss_type": "vespo"},
        {"delta": 1.5, "off_policy_mask_threshold": 0.5, "beta": 0.1, "use_bias_correction_kl": True},
        {"advantage_estimator": "rloo"},
        {"advantage_estimator": "reinforce_plus_plus"},
        {"advantage_estimator": "reinforce_plus_plus_baseline"},
        {"loss_type": "kl_cov", "kl_cov_ratio": 0.05},
        {"loss_type": "clip_cov", "clip_cov_ratio": 0.05},
        {"entropy_coeff": 0.01, "top_entropy_quantile": 0.5, "mask_zero_advantage_groups": True, "beta": 0.04},
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_two_steps_of_each_objective_and_estimator_train(
    overrides: dict[str, Any], tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """Each one through the whole loop (two steps, two optimizer passes over each batch so the ratio moves off 1):
    finite losses, and the policy moves."""
    server = StandInServer(lambda item: float(len(item["response"]) % 3) / 2)  # varied rewards
    cfg = _run_config(tiny_model_dir, prompt_files, tmp_path / "run", num_iterations=2, **overrides)
    result = train(cfg, scorer=server.scorer())
    assert len(result.history) == 2
    for row in result.history:
        assert math.isfinite(row["loss/policy"]) and math.isfinite(row["optim/grad_norm"])
    assert any(row["optim/grad_norm"] > 0 for row in result.history)
