"""Config: YAML loading, validation messages that say how to fix the value, and the CLI's handling of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trainer.__main__ import app
from trainer.config import ConfigError, GRPOConfig, config_from_dict, field_docs, load_config, parse_overrides

BASE = {"model_name_or_path": "m", "train_data": "t.jsonl"}


def test_yaml_loads_with_trl_names_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "model_name_or_path: m\ntrain_data: t.jsonl\nlearning_rate: 1e-5\nnum_generations: 4\n"
        "loss_type: dr_grpo\nscale_rewards: none\nepsilon_high: 0.28\nreward_server_urls: http://127.0.0.1:9\n"
    )
    cfg = load_config(path, parse_overrides(["max_steps=7", "beta=0.04"]))
    assert cfg.learning_rate == 1e-5  # PyYAML reads 1e-5 as a string; it is coerced
    assert (cfg.num_generations, cfg.loss_type, cfg.scale_rewards) == (4, "dr_grpo", "none")
    assert (cfg.max_steps, cfg.beta, cfg.epsilon_high) == (7, 0.04, 0.28)
    assert cfg.reward_server_urls == ("http://127.0.0.1:9",)


def test_every_field_has_a_one_line_docstring() -> None:
    docs = field_docs()
    names = [f.name for f in dataclasses.fields(GRPOConfig)]
    assert sorted(docs) == sorted(names)
    assert all(doc and "\n" not in doc for doc in docs.values())


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr": 1e-5}, "Did you mean 'learning_rate'"),  # another trainer's name
        ({"num_generation": 4}, "Did you mean 'num_generations'"),  # a typo
        ({"num_generations": 1}, "must be >= 2"),  # no group to compare within
        ({"prompt_batch_size": 3, "num_generations": 4, "gradient_accumulation_steps": 5}, "Choose one of"),
        ({"loss_type": "ppo"}, "must be one of"),
        ({"scale_rewards": True}, "must be one of"),  # TRL's old boolean form is not guessed at
        ({"temperature": 0.0}, "must be > 0 for training"),
        ({"top_p": 1.5}, r"must be in \(0, 1\]"),
        ({"epsilon": 1.2}, "must be in"),
        ({"beta": -0.1}, "must be >= 0"),
        ({"max_steps": "ten"}, "expected int"),
        ({"learning_rate": "fast"}, "expected float"),
        ({"rollout_chunk_prompts": 99}, "between 1 and prompt_batch_size"),
        ({"reward_server_urls": ["127.0.0.1:8000"]}, "http"),
        ({"mask_truncated_completions": "yes"}, "expected bool"),
    ],
)
def test_invalid_values_say_how_to_fix_them(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict({**BASE, **values})


def test_missing_required_option_is_named() -> None:
    with pytest.raises(ConfigError, match=r"lacks required option\(s\) \['train_data'\]"):
        config_from_dict({"model_name_or_path": "m"})


def test_chunk_default_is_a_quarter_of_the_prompts() -> None:
    assert config_from_dict({**BASE, "prompt_batch_size": 8}).chunk_prompts == 2
    assert config_from_dict({**BASE, "prompt_batch_size": 3}).chunk_prompts == 1
    assert config_from_dict({**BASE, "rollout_chunk_prompts": 3}).chunk_prompts == 3


def test_set_needs_key_value() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["max_steps"])


def test_cli_reports_a_config_error_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\ntrain_data: t.jsonl\nnum_generations: 1\n")
    result = CliRunner().invoke(app, ["train", "--config", str(path)])
    assert result.exit_code == 2
    assert "config error: num_generations=1" in result.output
    assert "Traceback" not in result.output
