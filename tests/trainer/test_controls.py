"""Online RFT, the random-reward control and the gradient-cosine figure (issue "RL that visibly works").

``rft_advantages`` and ``shuffle_rewards`` are checked on hand-made tensors; the loop's use of them and
``optim/grad_cosine`` on the tiny model against the stand-in reward server.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import torch

from tests.trainer.test_train import _config
from trainer.algorithms.advantages import (
    frac_zero_std_groups,
    group_advantages,
    group_stats,
    rft_advantages,
    shuffle_rewards,
)
from trainer.config import ConfigError, config_from_dict
from trainer.distributed import Distributed
from trainer.reward_client import RewardScorer
from trainer.stand_in import StandInServer
from trainer.train import _grad_cosine, train


def test_rft_weights_verified_completions_one_and_the_rest_zero() -> None:
    verified = torch.tensor([1.0, 0.0, math.nan, 1.0, 0.0])
    assert rft_advantages(verified).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert rft_advantages(verified).dtype == torch.float32


def test_shuffled_rewards_keep_the_batch_and_move_the_nulls_nowhere() -> None:
    rewards = torch.tensor([0.0, 1.0, math.nan, 2.0, 3.0, 4.0, math.nan, 5.0, 6.0, 7.0])
    out = shuffle_rewards(rewards, torch.Generator().manual_seed(0))
    assert torch.isnan(out[[2, 6]]).all()
    kept = out[~torch.isnan(out)]
    assert sorted(kept.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert kept.tolist() != [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # seed 0 does move them
    again = shuffle_rewards(rewards, torch.Generator().manual_seed(0))
    assert torch.equal(torch.nan_to_num(out, nan=-1.0), torch.nan_to_num(again, nan=-1.0))


def test_shuffled_within_groups_keep_each_group_and_move_the_nulls_nowhere() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.0, 0.25, 0.5, 0.75, 0.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    out = shuffle_rewards(rewards, torch.Generator().manual_seed(1), group_ids)
    assert math.isnan(out[3])
    assert sorted(out[[0, 1, 2]].tolist()) == [0.0, 0.0, 1.0]
    assert out[4:8].tolist() == [0.0, 0.0, 0.0, 0.0]  # an all-wrong group stays all wrong: no advantage
    assert sorted(out[8:].tolist()) == [0.0, 0.25, 0.5, 0.75]
    moved = [
        shuffle_rewards(rewards, torch.Generator().manual_seed(s), group_ids)[8:].tolist() != [0.25, 0.5, 0.75, 0.0]
        for s in range(4)
    ]
    assert any(moved)  # some seed does move them


def test_rft_trains_on_verified_completions_only(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """With no completion verified, online RFT has nothing to train on: the weights do not move; with every one
    verified, they do (GRPO would have zero advantages in both cases: no spread)."""
    none = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "none", max_steps=1, advantage_estimator="rft"),
        scorer=StandInServer(lambda item: 0.0).scorer(),
    )
    assert none.history[0]["optim/grad_norm"] == 0.0
    every = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "all", max_steps=1, advantage_estimator="rft"),
        scorer=StandInServer(lambda item: 1.0).scorer(),
    )
    assert every.history[0]["optim/grad_norm"] > 0.0
    outcome = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "outcome", max_steps=1),
        scorer=StandInServer(lambda item: 1.0).scorer(),
    )
    assert outcome.history[0]["optim/grad_norm"] == 0.0


def test_shuffled_rewards_change_the_update_but_not_the_logged_rewards(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    def by_length(item: dict[str, Any]) -> float:
        return float(len(item["response"]) % 3)

    plain = train(_config(tiny_model_dir, prompt_files, tmp_path / "plain"), scorer=StandInServer(by_length).scorer())
    shuffled = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "shuffled", shuffle_rewards=True),
        scorer=StandInServer(by_length).scorer(),
    )
    # the same first rollouts (same seed, same weights), so the same logged rewards; another update
    assert plain.history[0]["reward/mean"] == shuffled.history[0]["reward/mean"]
    assert plain.history[0]["loss/policy"] != shuffled.history[0]["loss/policy"]


def test_grad_cosine_against_the_last_step_hand_computed() -> None:
    w1, w2 = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    run = SimpleNamespace(dist=Distributed(), last_grad=None)

    def cosine(g1: list[float], g2: list[float]) -> float:
        w1.grad, w2.grad = torch.tensor(g1), torch.tensor(g2)
        return _grad_cosine(run, [w1, w2])  # type: ignore[arg-type]

    assert math.isnan(cosine([1.0, 2.0], [2.0]))  # the first step has nothing to compare with
    assert cosine([2.0, 4.0], [4.0]) == pytest.approx(1.0)  # the same direction, twice as long
    assert cosine([-2.0, -4.0], [-4.0]) == pytest.approx(-1.0)
    assert cosine([2.0, -1.0], [0.0]) == pytest.approx(0.0)  # (-2, -4, -4) . (2, -1, 0) = 0
    assert cosine([1.0, 0.0], [1.0]) == pytest.approx(2 / (math.sqrt(5) * math.sqrt(2)))  # (2,-1,0).(1,0,1)


def test_the_loop_logs_grad_cosine(tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path) -> None:
    # online RFT with every completion verified: each step has a gradient (GRPO's could be 0 with no spread)
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", max_steps=3, log_grad_cosine=True, advantage_estimator="rft"
    )
    history = train(cfg, scorer=StandInServer(lambda item: 1.0).scorer()).history
    assert math.isnan(history[0]["optim/grad_cosine"])
    assert all(-1.0 <= row["optim/grad_cosine"] <= 1.0 for row in history[1:])
    plain = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "plain", max_steps=1), scorer=StandInServer().scorer()
    )
    assert "optim/grad_cosine" not in plain.history[0]


def test_the_control_refuses_process_supervision() -> None:
    with pytest.raises(ConfigError, match="shuffle_rewards"):
        config_from_dict(
            {
                "model_name_or_path": "m",
                "train_data": "d.jsonl",
                "shuffle_rewards": True,
                "advantage_estimator": "process",
            }
        )
    with pytest.raises(ConfigError, match=r"advantage_estimator.*outcome.*process.*rft"):
        config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl", "advantage_estimator": "gae"})


def test_equal_shaped_rewards_summed_in_another_order_have_no_spread() -> None:
    """0.15 + 0.2 and 0.35 differ by one float32 ulp (2.98e-8): a group of them has a std of 1.7e-8, which a fixed
    1e-8 threshold reads as spread; divided by a small eps that gives advantages of about +-0.87 from rounding
    alone. Relative to the reward scale it is no spread, and the advantages are exactly 0."""
    summed = torch.tensor(0.15, dtype=torch.float32) + torch.tensor(0.2, dtype=torch.float32)
    rewards = torch.stack([summed, summed, torch.tensor(0.35), torch.tensor(0.35)])  # (4,) float32
    group_ids = torch.zeros(4, dtype=torch.long)
    stats = group_stats(rewards, group_ids)
    assert 1e-8 < float(stats.std[0]) < 2e-8  # what the old threshold saw
    assert not stats.spread.any()
    for scale in ("group", "batch", "none"):
        assert torch.equal(group_advantages(rewards, group_ids, scale, eps=1e-12), torch.zeros(4))  # type: ignore[arg-type]
    assert frac_zero_std_groups(rewards, group_ids) == 1.0
    # a real difference at the 4th decimal still counts, and gives the usual +-0.866
    real = torch.tensor([0.35, 0.3501, 0.35, 0.3501])
    assert group_stats(real, group_ids).spread.all()
    assert group_advantages(real, group_ids, "group", eps=0.0).tolist() == pytest.approx([-0.866, 0.866] * 2, abs=1e-3)


def _format_varies(request: httpx.Request) -> httpx.Response:
    """Every answer wrong (accuracy 0), but the first completion of each group gets format 1: shaping alone
    differs."""
    results = []
    for item in json.loads(request.content)["items"]:
        fmt = 1.0 if item["id"].endswith("-c0") else 0.0
        components = {
            "accuracy": {"score": 0.0, "weight": 1.0, "status": "ok", "detail": None, "info": {}},
            "format": {"score": fmt, "weight": 0.5, "status": "ok", "detail": None, "info": {}},
        }
        results.append({"id": item["id"], "reward": 0.5 * fmt, "status": "ok", "components": components})
    return httpx.Response(200, json={"results": results})


@pytest.mark.parametrize(("metric", "filled"), [(None, 2), ("accuracy", 2), ("reward", 0)])
def test_dynamic_sampling_filters_on_accuracy_not_on_shaping(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, metric: str | None, filled: int
) -> None:
    """All-wrong groups whose format scores differ: by default (accuracy) they have no spread, every round is
    spent and the step is filled with them; judged on the total reward they would be kept at once."""
    cfg = _config(
        tiny_model_dir,
        prompt_files,
        tmp_path / "run",
        max_steps=1,
        dynamic_sampling=True,
        max_num_gen_batches=2,
        dynamic_sampling_metric=metric,
        reward_components={"accuracy": 1.0, "format": 0.5},
    )
    scorer = RewardScorer("http://stand-in", client=httpx.AsyncClient(transport=httpx.MockTransport(_format_varies)))
    row = train(cfg, scorer=scorer).history[0]
    assert row["dynamic_sampling/filled_groups"] == filled
    assert row["dynamic_sampling/rounds"] == (2 if filled else 1)


def test_dynamic_sampling_metric_names_a_requested_component() -> None:
    with pytest.raises(ConfigError, match=r"dynamic_sampling_metric.*\['accuracy', 'format'\]"):
        config_from_dict(
            {
                "model_name_or_path": "m",
                "train_data": "d.jsonl",
                "dynamic_sampling_metric": "formatt",
                "reward_components": {"accuracy": 1.0, "format": 0.5},
            }
        )
