"""The algorithm registries: every registered advantage estimator and loss aggregation against hand-computed
tensors, the errors that list the choices, and a new entry that the loop and the config take without an edit.

The estimators run through :func:`trainer.train.compute_advantages` on a hand-made step (a stand-in run with one
process), so what is checked is what the loop computes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rlvr_client.client import ComponentResult, RewardResult, StepScore
from trainer.algorithms.advantages import (
    ADVANTAGE_EPS,
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    EstimatorOutput,
    estimator,
    group_advantages,
    shuffle_rewards,
)
from trainer.algorithms.losses import LOSS_TYPES, Normalisers, aggregate_loss, grpo_loss
from trainer.algorithms.registry import Registry
from trainer.config import ConfigError, GRPOConfig, config_from_dict
from trainer.distributed import Distributed
from trainer.rollout.base import RolloutBatch
from trainer.train import Rollouts, Scored, compute_advantages, sync_reference_when_due

NAN = math.nan
SQRT_THIRD = math.sqrt(1 / 3)


def _config(**overrides: Any) -> GRPOConfig:
    return config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl", **overrides})


def _result(reward: float | None, accuracy: float | None = None, steps: list[StepScore] | None = None) -> RewardResult:
    components = {} if accuracy is None else {"accuracy": ComponentResult(score=accuracy, weight=1.0, status="ok")}
    return RewardResult(id="i", reward=reward, status="ok", components=components, steps=steps)


def _step(rewards: list[float | None], config: GRPOConfig, *, width: int = 5, **results: Any) -> Any:
    """compute_advantages on a stand-in run: one process, one micro-batch, completions of ``width`` tokens (each
    token decodes to one character, so a step ending at character ``k`` ends at token ``k - 1``)."""
    n = len(rewards)
    steps = results.get("steps", [None] * n)
    accuracy = results.get("accuracy", [None] * n)
    scored = Scored(
        results=[_result(r, a, s) for r, a, s in zip(rewards, accuracy, steps, strict=True)],
        rewards=torch.tensor([NAN if r is None else r for r in rewards]),
    )
    batch = RolloutBatch(
        prompt_ids=torch.ones(n, 1, dtype=torch.long),
        prompt_mask=torch.ones(n, 1, dtype=torch.long),
        completion_ids=torch.ones(n, width, dtype=torch.long),
        completion_mask=torch.ones(n, width, dtype=torch.long),
        is_truncated=torch.zeros(n, dtype=torch.bool),
        prompt_index=torch.tensor(results.get("group_ids", [0] * n)),
        completion_texts=["x" * width] * n,
    )
    rollouts = Rollouts(rows=[], batch=batch, group_ids=batch.prompt_index, futures=[])
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: "x" * len(ids))
    run = SimpleNamespace(
        config=config, dist=Distributed(), tokenizer=tokenizer, prompt_cursor=0, device="cpu", micro=[slice(0, n)]
    )
    return compute_advantages(run, rollouts, scored)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------ estimators


def test_the_estimators_are_registered_in_the_order_the_config_lists_them() -> None:
    assert ADVANTAGE_ESTIMATORS.choices() == (
        "outcome",
        "process",
        "rft",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
    )
    assert LOSS_TYPES.choices() == (
        "grpo",
        "bnpo",
        "dr_grpo",
        "dapo",
        "cispo",
        "sapo",
        "luspo",
        "vespo",
        "kl_cov",
        "clip_cov",
    )
    needs_steps = [ADVANTAGE_ESTIMATORS.get(n).needs_steps for n in ADVANTAGE_ESTIMATORS.choices()]
    assert needs_steps == [False, True, False, False, False, False]


def test_outcome_is_the_group_advantage_hand_computed() -> None:
    # group 0: [1, 0, 0, 1] has mean 1/2 and unbiased std sqrt(1/3): +-0.5 / (sqrt(1/3) + eps) = +-0.866;
    # group 1: equal rewards and a null: 0 everywhere, and the null is not trained on
    adv = _step([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, None], _config(), group_ids=[0, 0, 0, 0, 1, 1, 1])
    a = 0.5 / (SQRT_THIRD + ADVANTAGE_EPS)
    assert adv.advantages.tolist() == pytest.approx([a, -a, -a, a, 0.0, 0.0, 0.0])
    assert adv.loss_mask.sum(-1).tolist() == [5, 5, 5, 5, 5, 5, 0]
    assert adv.metrics == {}


def test_outcome_with_scale_none_only_centres() -> None:
    adv = _step([1.0, 0.0, 0.0, 1.0], _config(scale_rewards="none"))
    assert adv.advantages.tolist() == [0.5, -0.5, -0.5, 0.5]


def test_rft_trains_on_verified_completions_with_no_baseline() -> None:
    # verified: accuracy 1 (or, without accuracy, a reward of at least 1); a null reward is not trained on
    adv = _step([1.0, 0.3, 1.0, None], _config(advantage_estimator="rft"), accuracy=[1.0, 0.0, None, None])
    assert adv.advantages.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert adv.loss_mask.sum(-1).tolist() == [5, 5, 5, 0]


def test_shuffled_rewards_are_the_outcome_of_the_permuted_rewards() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, None]
    group_ids = [0, 0, 0, 0, 1, 1, 1, 1]
    adv = _step(rewards, _config(shuffle_rewards=True, seed=3), group_ids=group_ids)
    as_tensor = torch.tensor([NAN if r is None else r for r in rewards])
    # the loop's seed for the step: seed * 1_000_003 + prompt_cursor (0 here)
    permuted = shuffle_rewards(as_tensor, torch.Generator().manual_seed(3 * 1_000_003))
    assert torch.equal(adv.advantages, group_advantages(permuted, torch.tensor(group_ids)))
    assert adv.loss_mask.sum(-1).tolist()[-1] == 0  # the null stays in place, not trained on


def test_rewards_shuffled_within_groups_give_grpo_advantages_to_random_members() -> None:
    """Group 0's rewards [1, 0, 0, 1] have mean 0.5 and unbiased std 0.577: advantages +-0.866 whatever the order;
    group 1 [0, 0, 0] has no spread and stays at zero (across the batch it would get some)."""
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    group_ids = [0, 0, 0, 0, 1, 1, 1]
    adv = _step(rewards, _config(shuffle_rewards="group", seed=5), group_ids=group_ids)
    permuted = shuffle_rewards(
        torch.tensor(rewards), torch.Generator().manual_seed(5 * 1_000_003), torch.tensor(group_ids)
    )
    assert torch.equal(adv.advantages, group_advantages(permuted, torch.tensor(group_ids)))
    assert sorted(round(a, 3) for a in adv.advantages[:4].tolist()) == [-0.866, -0.866, 0.866, 0.866]
    assert adv.advantages[4:].tolist() == [0.0, 0.0, 0.0]


def test_process_gives_token_advantages_hand_computed() -> None:
    """Completion 0 has steps [1, 0] ending at tokens 1 and 3, completion 1 one step [1]; the last scored step of
    each is extended to the completion's last token (4). The group's steps [1, 0, 1] have mean 2/3 and unbiased std
    sqrt(1/3): r~ = +0.577 and -1.155, and each token gets the sum over the steps ending at or after it."""
    steps = [
        [StepScore(0, 2, 1.0, "ok"), StepScore(2, 4, 0.0, "ok")],  # characters [0, 2) and [2, 4): tokens 1 and 3
        [StepScore(0, 3, 1.0, "ok")],
        [StepScore(0, 2, None, "no_claim")],  # no scored step: not trained on
    ]
    adv = _step([1.0, 1.0, 1.0], _config(advantage_estimator="process"), steps=steps)
    up, down = (1 / 3) / (SQRT_THIRD + ADVANTAGE_EPS), -(2 / 3) / (SQRT_THIRD + ADVANTAGE_EPS)
    assert adv.advantages[0].tolist() == pytest.approx([up + down, up + down, down, down, down])
    assert adv.advantages[1].tolist() == pytest.approx([up] * 5)
    assert adv.advantages[2].tolist() == [0.0] * 5
    assert adv.loss_mask.sum(-1).tolist() == [5, 5, 0]
    assert adv.metrics == pytest.approx(
        {"steps/per_completion": 4 / 3, "steps/frac_scored": 3 / 4, "steps/mean_score": 2 / 3}
    )


# ---------------------------------------------------------------------------------------------------------- losses


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        ("grpo", (3 / 2 + 4 / 1) / 2),  # each completion's token mean, averaged over the 2 completions
        ("bnpo", 7 / 3),  # the 3 tokens of the micro-batch
        ("dr_grpo", 7 / (2 * 4)),  # 2 completions * max_completion_length 4
        ("dapo", 7 / 6),  # the 6 tokens of the whole batch
    ],
)
def test_each_loss_type_aggregates_as_hand_computed(loss_type: str, expected: float) -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])  # masked sum 1 + 2 + 4 = 7
    got = aggregate_loss(per_token, mask, loss_type, max_completion_length=4, num_items_in_batch=6)  # type: ignore[arg-type]
    assert float(got) == pytest.approx(expected)
    entry = LOSS_TYPES.get(loss_type)
    normalisers = Normalisers(torch.tensor(2.0), 4, 6, 1, None)
    assert float(entry(per_token * mask, mask.float(), normalisers)) == pytest.approx(expected)


# ---------------------------------------------------------------------------------------------------------- errors


def test_unknown_names_list_the_choices() -> None:
    with pytest.raises(
        ValueError, match=r"advantage_estimator must be one of \('outcome', 'process', 'rft', 'rloo'.*got 'gae'"
    ):
        ADVANTAGE_ESTIMATORS.get("gae")
    with pytest.raises(
        ValueError, match=r"loss_type must be one of \('grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo'.*'ppo'"
    ):
        aggregate_loss(torch.ones(1, 1), torch.ones(1, 1), "ppo", max_completion_length=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"loss_type.*must be one of \('grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo'"):
        _config(loss_type="ppo")
    with pytest.raises(ConfigError, match=r"advantage_estimator.*must be one of \('outcome', 'process', 'rft', 'rloo'"):
        _config(advantage_estimator="gae")


def test_a_registry_refuses_a_name_twice_and_knows_no_unhashable_name() -> None:
    registry: Registry[int] = Registry("knob")
    registry.register("a")(1)
    with pytest.raises(ValueError, match="knob 'a' is already registered"):
        registry.register("a")(2)
    assert registry.get("a") == 1
    assert ["x"] not in registry
    with pytest.raises(ValueError, match=r"knob must be one of \('a',\), got \['x'\]"):
        registry.get(["x"])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------ new entries


@pytest.fixture
def toy_entries() -> Iterator[None]:
    """A toy estimator (twice the reward, every completion trained on) and a toy loss (the masked sum)."""

    @estimator("toy")
    def toy(inputs: AdvantageInputs, config: GRPOConfig) -> EstimatorOutput:
        rewards = torch.nan_to_num(inputs.rewards)
        return EstimatorOutput(2 * rewards, trained=torch.ones_like(rewards, dtype=torch.bool))

    @LOSS_TYPES.register("toy_sum")
    def toy_sum(masked: torch.Tensor, mask: torch.Tensor, n: Normalisers) -> torch.Tensor:
        return masked.sum()

    try:
        yield
    finally:
        ADVANTAGE_ESTIMATORS.unregister("toy")
        LOSS_TYPES.unregister("toy_sum")


def test_a_registered_estimator_and_loss_need_no_edit_of_the_loop_or_the_config(toy_entries: None) -> None:
    config = _config(advantage_estimator="toy", loss_type="toy_sum")  # the config validates against the registry
    adv = _step([1.0, 0.0, None, 0.5], config)
    assert adv.advantages.tolist() == [2.0, 0.0, 0.0, 1.0]
    assert adv.loss_mask.sum(-1).tolist() == [5, 5, 5, 5]  # the toy trains on the null too: its choice
    logp = torch.zeros(2, 2)
    out = grpo_loss(
        logp,
        logp,
        torch.tensor([1.0, -3.0]),
        torch.tensor([[1, 1], [1, 0]]),
        loss_type="toy_sum",  # type: ignore[arg-type]
        epsilon=0.2,
        epsilon_high=None,
        beta=0.0,
        ref_logp=None,
        max_completion_length=2,
    )
    assert float(out.loss) == -(1.0 + 1.0 - 3.0)  # ratio 1: the per-token loss is -A
    assert "toy" in ADVANTAGE_ESTIMATORS and "toy_sum" in LOSS_TYPES


def test_a_test_entry_is_gone_afterwards() -> None:
    assert "toy" not in ADVANTAGE_ESTIMATORS and "toy_sum" not in LOSS_TYPES


# ------------------------------------------------------------------------------------------------- reference sync


def test_the_reference_syncs_on_its_schedule_only(monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr("trainer.train.sync_reference", lambda run: synced.append(len(synced)))
    on = SimpleNamespace(config=_config(beta=0.04, sync_ref_model=True, ref_model_sync_steps=2))
    assert [sync_reference_when_due(on, u) for u in range(1, 6)] == [0.0, 1.0, 0.0, 1.0, 0.0]  # type: ignore[arg-type]
    off = SimpleNamespace(config=_config(beta=0.04))
    assert [sync_reference_when_due(off, u) for u in range(1, 6)] == [0.0] * 5  # type: ignore[arg-type]
    assert len(synced) == 2
