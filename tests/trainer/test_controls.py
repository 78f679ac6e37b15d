"""Online RFT, the random-reward control and the gradient-cosine figure (issue "RL that visibly works").

``rft_advantages`` and ``shuffle_rewards`` are checked on hand-made tensors; the loop's use of them and
``optim/grad_cosine`` on the tiny model against the stand-in reward server.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.trainer.conftest import StandInServer
from trainer.config import ConfigError, config_from_dict
from trainer.distributed import Distributed
from trainer.grpo import rft_advantages, shuffle_rewards
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


def _config(model_dir: Path, files: tuple[Path, Path], out: Path, **overrides: Any) -> Any:
    return config_from_dict(
        {
            "model_name_or_path": str(model_dir),
            "train_data": str(files[0]),
            "output_dir": str(out),
            "max_steps": 2,
            "prompt_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 6,
            "learning_rate": 1e-2,
            "progress_bar": False,
            "report_to_tensorboard": False,
            "seed": 7,
            **overrides,
        }
    )


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
        config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl", "advantage_estimator": "rloo"})
