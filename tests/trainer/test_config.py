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
        # NaN passes every `< 0` check and inf every upper bound: both are refused for every float option.
        ({"beta": float("nan")}, "beta=nan: must be a finite number"),
        ({"temperature": float("inf")}, "temperature=inf: must be a finite number"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm=nan: must be a finite number"),
        ({"learning_rate": "nan"}, "learning_rate=nan: must be a finite number"),  # coerced from a string
        # Clip-higher widens the upper side; below epsilon it is a slip (0.028 for 0.28).
        ({"epsilon": 0.2, "epsilon_high": 0.028}, r"epsilon_high=0.028: must be >= epsilon \(0.2\)"),
        # An empty string is falsy: it would silently skip the resume or the evaluation.
        ({"resume_from_checkpoint": ""}, "must not be empty; use null"),
        ({"eval_data": "  "}, "must not be empty; use null"),
        ({"output_dir": ""}, "output_dir='': must not be empty"),
        ({"seed": -1}, r"seed=-1: must be in \[0, 2\*\*32\)"),  # NumPy refuses it at the start of training
        # TRL names with no counterpart get what to do instead, not a look-alike (num_iterations is not epochs);
        # TRL's and verl's names for our options get ours (the rules of trainer/config/foreign/).
        ({"num_train_epochs": 3}, r"not supported \(TRL's option\): training length is set in steps: set max_steps"),
        ({"per_device_train_batch_size": 8}, "is TRL's name; ours is prompt_batch_size"),
        ({"num_generations_eval": 4}, "is TRL's name; ours is eval_num_generations"),
        ({"kl_loss_coef": 0.01}, "is verl's name, actor_rollout_ref.actor.kl_loss_coef; ours is beta"),
        ({"actor_rollout_ref.rollout.n": 8}, "is verl's name; ours is num_generations"),
        # vLLM: server mode has no supported weight-update path off GPUs; TRL's newer and absent names are mapped.
        ({"use_vllm": True, "vllm_mode": "server"}, "vllm_mode='server': is not built"),
        ({"vllm_mode": "remote"}, "must be 'colocate' or 'server'"),
        ({"vllm_importance_sampling_clip_max": 2.0}, "TRL's name; ours is vllm_importance_sampling_cap"),
        ({"vllm_importance_sampling_cap": 0.0}, "vllm_importance_sampling_cap=0.0: must be > 0"),
        ({"vllm_importance_sampling_mode": "token"}, "must be one of"),
        ({"vllm_gpu_memory_utilization": 1.5}, r"must be in \(0, 1\]"),
        ({"vllm_tensor_parallel_size": 2}, "the colocated engine runs on the trainer's one device"),
        ({"vllm_server_port": 8001}, r"has no effect here \(TRL's option\): vllm_mode 'server' is not built"),
        ({"scale_rewards": True}, "TRL's boolean form: write 'group' for True"),
        ({"scale_rewards": False}, "write 'none' for False"),
        ({"reward_components": {"accuracy": "1.0"}}, "maps a component name to a number"),
        ({"reward_components": {"format": {"weight": None}}}, "maps a component name to a number"),
        ({"reward_server_urls": ["http://a:8000,http://b:8000"]}, "is not one URL"),
        ({"reward_server_urls": ["http://a:8000/v1/rewards"]}, "the client adds /v1/rewards"),
        ({"reward_server_urls": ["http://a:80000"]}, "bad port"),
        ({"reward_server_urls": ["http://a", 8000]}, "8000 has type int; expected a list of str"),
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


def test_an_unknown_set_option_is_blamed_on_the_command_line_not_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\ntrain_data: t.jsonl\n")
    result = CliRunner().invoke(app, ["train", "--config", str(path), "--set", "lr=1e-5"])
    assert result.exit_code == 2
    assert "config error: unknown option 'lr' in --set lr=1e-5. Did you mean 'learning_rate'?" in result.output
    assert str(path) not in result.output
    with pytest.raises(ConfigError, match=r"^option 'num_train_epochs' in --set num_train_epochs=3 is not supported"):
        load_config(path, parse_overrides(["num_train_epochs=3"]))
    # The same name in the file is still the file's.
    path.write_text("model_name_or_path: m\ntrain_data: t.jsonl\nlr: 1.0e-5\n")
    with pytest.raises(ConfigError, match=f"unknown option 'lr' in {path}"):
        load_config(path, {})


def test_cli_reports_a_config_error_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\ntrain_data: t.jsonl\nnum_generations: 1\n")
    result = CliRunner().invoke(app, ["train", "--config", str(path)])
    assert result.exit_code == 2
    assert "config error: num_generations=1" in result.output
    assert "Traceback" not in result.output


def test_accepted_edge_values() -> None:
    cfg = config_from_dict(
        {**BASE, "epsilon": 0.2, "epsilon_high": 0.2, "seed": 0, "reward_components": {"format": {"weight": 0}}}
    )
    assert (cfg.epsilon_high, cfg.seed) == (0.2, 0)
    assert config_from_dict({**BASE, "reward_server_urls": "http://gw.local/rlvr/"}).reward_server_urls == (
        "http://gw.local/rlvr/",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_name_or_path: m\ntrain_data: t.jsonl\nbeta: 0.0\nbeta: 0.04\n", "option 'beta' is given twice"),
        ("model_name_or_path: m\ntrain_data: [t.jsonl\n", "is not valid YAML"),
        ("- model_name_or_path: m\n", "must hold a YAML mapping"),
        ("1: 2\n", "option names are strings"),
    ],
)
def test_yaml_problems_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_bom_and_a_bad_set_value(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes("\ufeffmodel_name_or_path: m\ntrain_data: t.jsonl\n".encode())  # as Windows editors save it
    assert load_config(path).model_name_or_path == "m"
    with pytest.raises(ConfigError, match=r"--set max_steps=\[ is not valid YAML"):
        parse_overrides(["max_steps=["])
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model_name_or_path: m\ntrain_data: [t.jsonl\n", "config error: "),
        ("model_name_or_path: m\ntrain_data: t.jsonl\nbeta: 0\nbeta: 1\n", "config error: "),
        ("model_name_or_path: m\ntrain_data: t.jsonl\nnum_train_epochs: 3\n", "set max_steps"),
    ],
)
def test_cli_reports_yaml_errors_without_traceback(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["train", "--config", str(path)])
    assert result.exit_code == 2
    assert expected in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
