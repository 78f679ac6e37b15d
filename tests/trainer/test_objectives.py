"""The objectives and estimators of issue 22 against hand-computed values, in the main environment.

Their equality with verl's ``core_algos`` and TRL's ``GRPOTrainer._compute_loss`` is tested against the installed
packages in ``tests/integrations/test_algorithms_{verl,trl}.py``; here each one's equation is checked by hand, and
the estimators through :func:`trainer.train.compute_advantages` (the stand-in run of ``test_registries``).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainer.test_registries import _config, _step
from trainer.algorithms.advantages import reinforce_plus_plus_advantages, rloo_advantages, token_whiten

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
