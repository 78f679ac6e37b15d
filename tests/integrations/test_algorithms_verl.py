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


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_rloo_equals_verl(name: str) -> None:
    rewards, groups, lengths = BATCHES[name]
    token_rewards, mask, index, keep = _verl_inputs(rewards, groups, lengths)
    theirs, _ = core_algos.compute_rloo_outcome_advantage(token_rewards, mask, index)
    ours = rloo_advantages(torch.tensor(rewards), torch.tensor(groups))
    torch.testing.assert_close(_ours_on_tokens(ours, lengths, keep), theirs)
    _check_nulls_are_zero(ours, rewards)


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_reinforce_plus_plus_equals_verl(name: str) -> None:
    rewards, groups, lengths = BATCHES[name]
    token_rewards, mask, _, keep = _verl_inputs(rewards, groups, lengths)
    theirs, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        token_rewards, mask, config=AlgoConfig(gamma=1.0)
    )
    ours = reinforce_plus_plus_advantages(torch.tensor(rewards), torch.tensor(lengths))
    torch.testing.assert_close(_ours_on_tokens(ours, lengths, keep), theirs)
    _check_nulls_are_zero(ours, rewards)


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_reinforce_plus_plus_baseline_equals_verl(name: str) -> None:
    rewards, groups, lengths = BATCHES[name]
    token_rewards, mask, index, keep = _verl_inputs(rewards, groups, lengths)
    theirs, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(token_rewards, mask, index)
    ours = reinforce_plus_plus_advantages(torch.tensor(rewards), torch.tensor(lengths), torch.tensor(groups))
    torch.testing.assert_close(_ours_on_tokens(ours, lengths, keep), theirs)
    _check_nulls_are_zero(ours, rewards)


def test_the_estimators_are_registered_under_verls_names() -> None:
    from trainer.algorithms.advantages import ADVANTAGE_ESTIMATORS

    for name in ("rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        assert name in ADVANTAGE_ESTIMATORS
        assert core_algos.get_adv_estimator_fn(name) is not None  # verl knows it by the same name
