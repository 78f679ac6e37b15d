"""configs/r1_zero.yaml and configs/r1.yaml load, and hold DeepSeek-R1's published settings."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT
from trainer.config import load_config


@pytest.mark.parametrize(("name", "preset"), [("r1_zero", "r1_zero"), ("r1", "r1")])
def test_r1_configs_hold_the_published_settings(name: str, preset: str) -> None:
    cfg = load_config(REPO_ROOT / "configs" / f"{name}.yaml")
    assert cfg.reward_preset == preset
    assert (cfg.learning_rate, cfg.beta, cfg.temperature) == (3e-6, 0.001, 1.0)
    assert (cfg.num_generations, cfg.completions_per_step, cfg.max_steps) == (16, 512, 10_400)
    assert cfg.completion_length_at(0) == cfg.completion_length_at(8_199) == 32_768
    assert cfg.completion_length_at(8_200) == cfg.completion_length_at(10_399) == 65_536
    assert (cfg.sync_ref_model, cfg.ref_model_sync_steps, cfg.ref_model_mixup_alpha) == (True, 400, 1.0)
    assert (cfg.loss_type, cfg.scale_rewards, cfg.num_iterations) == ("grpo", "group", 1)
