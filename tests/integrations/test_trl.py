"""TRL 1.16.0's GRPOTrainer, from examples/trl/grpo_trl.py, for a few steps on CPU against a live server."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integrations.conftest import requests_to

sys.path.insert(0, str(REPO_ROOT / "examples" / "trl"))
import grpo_trl


def test_grpo_trainer_runs_with_per_component_rewards_weighted_by_trl(live_server: str, tmp_path: Path) -> None:
    trainer = grpo_trl.build_trainer(str(tmp_path), max_steps=2)
    before = requests_to(live_server, "/v1/rewards")
    trainer.train()
    steps = [e for e in trainer.state.log_history if "reward" in e]
    assert len(steps) == 2
    # one request per step for the three functions (TRL generates once per step at these sizes)
    assert requests_to(live_server, "/v1/rewards") - before == 2
    for entry in steps:
        means = [entry[f"rewards/rlvr_{name}/mean"] for name in grpo_trl.COMPONENTS]
        # random completions: no answer, no format; language abstains on them (counted 1.0), so the reward is
        # TRL's weighted sum 1.0 * 0 + 0.5 * 0 + 0.25 * 1.0, not the unweighted 1.0
        assert means[2] == 1.0
        assert entry["reward"] == pytest.approx(sum(w * m for w, m in zip(grpo_trl.REWARD_WEIGHTS, means, strict=True)))


def test_an_unscoreable_completion_is_none_in_every_function(live_server: str, tmp_path: Path) -> None:
    trainer = grpo_trl.build_trainer(str(tmp_path), max_steps=1)
    prompts = ["What is 1 + 1?"] * 4
    completions = ["<think>1 + 1 = 2</think> 2"] * 4
    inputs = [{"prompt": p, "solution": s} for p, s in zip(prompts, ["2", "3", "None", "2"], strict=True)]
    ids = [trainer.processing_class.encode(c) for c in completions]
    rewards_per_func = trainer._calculate_rewards(inputs, prompts, completions, ids)  # TRL's own reward step
    rows = rewards_per_func.tolist()
    # accuracy, format (think block, then the answer), language (too short to judge: counted 1.0)
    assert rows[0] == [1.0, 1.0, 1.0] and rows[1] == [0.0, 1.0, 1.0]
    assert all(math.isnan(v) for v in rows[2])  # the placeholder reference: None -> NaN in every column
    assert rows[3] == rows[0]
