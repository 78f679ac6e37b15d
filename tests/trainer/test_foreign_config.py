"""Carrying a TRL or verl config over (issue 22 D6): ``trainer.config.foreign`` and ``python -m trainer convert``.
The same rules on the real packages' own configs are in ``tests/integrations/test_foreign_configs.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.config import ConfigError, config_from_dict
from trainer.config.foreign import convert, flatten, rules_table

REPO = Path(__file__).resolve().parents[2]


def test_a_trl_dict_keeps_its_values_and_translates_the_batch_and_scale_rewards() -> None:
    trl = {
        "learning_rate": 3e-6,
        "beta": 0.04,
        "num_generations": 4,
        "per_device_train_batch_size": 16,  # 16 completions = 4 prompts x 4 on one process
        "steps_per_generation": 1,
        "scale_rewards": False,  # TRL's boolean form
        "max_steps": 50,
        "use_bias_correction_kl": True,  # TRL's default, not ours: kept
        "eval_steps": None,  # null: our default
        "num_train_epochs": 3.0,  # dropped: training length is max_steps
        "logging_steps": 10,  # ignored
        "push_to_hub": False,  # ignored
    }
    out = convert(trl, "trl")
    assert out.options == {
        "learning_rate": 3e-6,
        "beta": 0.04,
        "num_generations": 4,
        "prompt_batch_size": 4,
        "scale_rewards": "none",
        "max_steps": 50,
        "use_bias_correction_kl": True,
    }
    assert [r.split(":")[0] for r in out.report["refused"]] == ["steps_per_generation", "num_train_epochs"]
    assert out.report["ignored"] == ["logging_steps", "push_to_hub"]
    cfg = config_from_dict({**out.options, "model_name_or_path": "m", "train_data": "d"})
    assert (cfg.prompt_batch_size, cfg.scale_rewards, cfg.use_bias_correction_kl) == (4, "none", True)


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("steps_per_generation", 4, "num_iterations"),
        ("repetition_penalty", 1.1, "log-probs match the sampler"),
        ("warmup_ratio", 0.1, "warmup_steps"),
        ("max_steps", -1, "set max_steps"),
        ("entropy_coef", 0.01, "use entropy_coeff"),  # TRL's bonus is a plain token mean, ours aggregated as loss
        ("use_adaptive_entropy", True, "fixed entropy_coeff"),  # an entropy bonus even at entropy_coef 0
    ],
)
def test_a_trl_option_with_an_effect_we_lack_is_an_error_naming_what_to_set(
    option: str, value: object, says: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{option}=.*{says}"):
        convert({option: value}, "trl")


def test_completions_that_do_not_split_into_groups_are_refused() -> None:
    with pytest.raises(ConfigError, match="not a multiple of num_generations 8"):
        convert({"per_device_train_batch_size": 12, "num_generations": 8}, "trl")


VERL = {
    "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False, "use_kl_in_reward": False},
    "actor_rollout_ref": {
        "model": {"path": "Qwen/Qwen2.5-0.5B"},
        "actor": {
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "policy_loss": {"loss_mode": "gspo"},
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.0003,
            "clip_ratio_high": 0.0004,
            "clip_ratio_c": 3.0,
            "use_kl_loss": True,
            "kl_loss_coef": 0.001,
            "kl_loss_type": "low_var_kl",
            "entropy_coeff": 0.001,
            "ppo_epochs": 2,
            "optim": {"lr": 1e-6, "lr_warmup_steps": -1, "weight_decay": 0.01},
            "grad_clip": 1.0,
            "ppo_mini_batch_size": 256,  # ignored: mini-batches are gradient_accumulation_steps here
        },
        "rollout": {"n": 8, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "tensor_model_parallel_size": 2},
    },
    "data": {
        "train_batch_size": 64,
        "max_prompt_length": 512,
        "max_response_length": 1024,
        "train_files": ["gsm8k/train.parquet"],
    },
    "trainer": {"total_training_steps": 100, "n_gpus_per_node": 8},
}


def test_a_verl_config_maps_estimator_aggregation_clip_and_kl() -> None:
    out = convert(VERL, "verl")
    assert out.options == {
        "advantage_estimator": "outcome",
        "scale_rewards": "none",  # norm_adv_by_std_in_grpo: false is Dr. GRPO's advantage
        "model_name_or_path": "Qwen/Qwen2.5-0.5B",
        "loss_type": "dr_grpo",
        "importance_sampling_level": "sequence_token",
        "epsilon": 0.0003,  # clip_ratio_low wins over clip_ratio
        "epsilon_high": 0.0004,
        "delta": 3.0,
        "beta": 0.001,
        "entropy_coeff": 0.001,
        "num_iterations": 2,
        "learning_rate": 1e-6,
        "warmup_steps": 0,
        "weight_decay": 0.01,
        "max_grad_norm": 1.0,
        "num_generations": 8,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "prompt_batch_size": 64,
        "max_prompt_length": 512,
        "max_completion_length": 1024,
        "train_data": "gsm8k/train.parquet",
        "max_steps": 100,
    }
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in out.report["ignored"]
    config_from_dict(out.options)  # valid as it stands


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        ("algorithm.adv_estimator", "gae", "grpo"),
        ("algorithm.use_kl_in_reward", True, "set beta"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "cispo", "gspo"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "geo_mean", "kl_cov"),
    ],
)
def test_a_verl_option_we_lack_is_an_error(path: str, value: object, says: str) -> None:
    nested: dict = {}
    node = nested
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    with pytest.raises(ConfigError, match=says):
        convert(nested, "verl")


def test_flatten_and_the_docs_table() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}
    table = rules_table()
    assert "| verl | `algorithm.adv_estimator` | mapped |" in table
    assert "| TRL | `steps_per_generation` | refused |" in table


def test_the_convert_command(tmp_path: Path) -> None:
    src = tmp_path / "trl.json"
    src.write_text(json.dumps({"beta": 0.04, "num_generations": 4, "per_device_train_batch_size": 8}))
    run = subprocess.run(
        [sys.executable, "-m", "trainer", "convert", str(src), "--from", "trl"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert yaml.safe_load(run.stdout) == {"beta": 0.04, "num_generations": 4, "prompt_batch_size": 2}
    assert "# mapped: per_device_train_batch_size; beta; num_generations" in run.stderr  # rules first
    src.write_text(json.dumps({"steps_per_generation": 4}))
    bad = subprocess.run(
        [sys.executable, "-m", "trainer", "convert", str(src), "--from", "trl"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert bad.returncode == 2 and "steps_per_generation=4" in bad.stderr and "Traceback" not in bad.stderr


def test_verls_kl_cov_maps_with_its_options_after_the_aggregation() -> None:
    actor = {
        "loss_agg_mode": "token-mean",
        "policy_loss": {"loss_mode": "kl_cov", "kl_cov_ratio": 0.002, "ppo_kl_coef": 0.5},
    }
    out = convert({"actor_rollout_ref": {"actor": actor}}, "verl")
    assert out.options == {"loss_type": "kl_cov", "kl_cov_ratio": 0.002, "ppo_kl_coef": 0.5}
    actor["loss_agg_mode"] = "seq-mean-token-mean"
    with pytest.raises(ConfigError, match="aggregates as token-mean"):
        convert({"actor_rollout_ref": {"actor": actor}}, "verl")
