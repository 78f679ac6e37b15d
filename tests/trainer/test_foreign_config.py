"""Carrying a TRL or verl config over (issue 22 D6): the rules of ``trainer.config.foreign``, ``convert`` and the
loader's fix-its (``trainer.config.conversion``), and ``python -m trainer convert``. The same rules on the real
packages' own configs are in ``tests/integrations/test_foreign_configs.py``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.config import ConfigError, GRPOConfig, config_from_dict
from trainer.config.conversion import convert, flatten, foreign_hint, rules_table
from trainer.config.foreign import RULES, SOURCE_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
OURS = {f.name for f in dataclasses.fields(GRPOConfig)}
NEEDED = {"model_name_or_path": "m", "train_data": "d"}


def _nested(path: str, value: Any, into: dict | None = None) -> dict:
    """``("a.b.c", 1)`` -> ``{"a": {"b": {"c": 1}}}`` (merged into ``into``)."""
    out = into if into is not None else {}
    node = out
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return out


# ---------------------------------------------------------------------------------------------------- TRL


def test_a_trl_dict_keeps_its_values_translates_the_batch_and_takes_trls_defaults() -> None:
    trl = {
        "learning_rate": 3e-6,
        "beta": 0.04,
        "num_generations": 4,
        "per_device_train_batch_size": 16,  # 16 completions = 4 prompts x 4 on one process
        "steps_per_generation": 1,
        "gradient_accumulation_steps": 1,
        "scale_rewards": False,  # TRL's boolean form
        "max_steps": 50,
        "eval_steps": None,  # null: our default
        "num_train_epochs": 3.0,  # dropped: max_steps is set
        "logging_steps": 10,  # ignored
        "push_to_hub": False,  # ignored
    }
    out = convert(trl, "trl")
    assert out.options == {
        "learning_rate": 3e-6,
        "beta": 0.04,
        "num_generations": 4,
        "gradient_accumulation_steps": 1,
        "prompt_batch_size": 4,
        "scale_rewards": "none",
        "max_steps": 50,
        # not set in the dict, and TRL's default is not ours: TRL's
        "use_bias_correction_kl": True,
        "gradient_checkpointing": True,
        "disable_dropout": False,
        "vllm_importance_sampling_mode": "sequence_mask",
        "save_steps": 500,
    }
    defaulted = [r.split(":")[0] for r in out.report["defaulted"]]
    assert sorted(defaulted) == sorted(set(SOURCE_DEFAULTS["trl"]) - {"per_device_train_batch_size"})
    assert "use_bias_correction_kl: TRL's default True (use_bias_correction_kl: True)" in out.report["defaulted"]
    assert [r.split(":")[0] for r in out.report["refused"]] == ["steps_per_generation", "num_train_epochs"]
    assert out.report["ignored"] == ["logging_steps", "push_to_hub"]
    cfg = config_from_dict({**out.options, **NEEDED})
    assert (cfg.prompt_batch_size, cfg.scale_rewards, cfg.use_bias_correction_kl) == (4, "none", True)


def test_trls_default_batch_and_steps_when_the_dict_leaves_them_out() -> None:
    out = convert({"num_generations": 4, "gradient_accumulation_steps": 2}, "trl")
    # TRL's default: 8 completions per device x steps_per_generation (= gradient_accumulation_steps) / 4 per group
    assert out.options["prompt_batch_size"] == 8 * 2 // 4
    assert "per_device_train_batch_size: TRL's default 8 (prompt_batch_size: 4)" in out.report["defaulted"]
    assert "max_steps" not in out.options  # TRL's -1 (epochs) has no counterpart: ours is kept, and said so
    assert any(r.startswith("max_steps: TRL's default -1 trains by epochs") for r in out.report["defaulted"])
    assert config_from_dict({**out.options, **NEEDED}).max_steps == GRPOConfig.max_steps


@pytest.mark.parametrize(
    ("value", "ours"), [("group", "group"), ("batch", "batch"), ("none", "none"), (True, "group"), (False, "none")]
)
def test_trls_scale_rewards_in_every_form(value: object, ours: str) -> None:
    assert convert({"scale_rewards": value, "max_steps": 1}, "trl").options["scale_rewards"] == ours


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("steps_per_generation", 4, "num_iterations"),
        ("repetition_penalty", 1.1, "log-probs match the sampler"),
        ("warmup_ratio", 0.1, "warmup_steps"),
        ("max_steps", -1, "set max_steps"),
        ("optim", "sgd", "torch's AdamW"),
        ("multi_objective_aggregation", "normalize_then_sum", "summed, then normalised"),
        ("lr_scheduler_type", "cosine_with_restarts", "the schedules here are"),
        ("save_strategy", "epoch", "every save_steps steps"),
        ("scale_rewards", "global", "group, batch, none or a boolean"),
        ("entropy_coef", 0.01, "use entropy_coeff"),  # TRL's bonus is a plain token mean, ours aggregated as loss
        ("use_adaptive_entropy", True, "fixed entropy_coeff"),  # an entropy bonus even at entropy_coef 0
    ],
)
def test_a_trl_option_with_an_effect_we_lack_is_an_error_naming_what_to_set(
    option: str, value: object, says: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{option}=.*{says}"):
        convert({"max_steps": 5, option: value}, "trl")


def test_completions_that_do_not_split_into_groups_are_refused() -> None:
    with pytest.raises(ConfigError, match="not a multiple of num_generations 8"):
        convert({"per_device_train_batch_size": 12, "num_generations": 8}, "trl")


# ---------------------------------------------------------------------------------------------------- verl

VERL = {
    "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False, "use_kl_in_reward": False},
    "actor_rollout_ref": {
        "model": {"path": "Qwen/Qwen2.5-0.5B", "lora_rank": 32, "lora_alpha": 64, "target_modules": "all-linear"},
        "actor": {
            "loss_agg_mode": "seq-mean-token-sum-norm",
            "policy_loss": {"loss_mode": "gspo"},
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.0003,
            "clip_ratio_high": 0.0004,
            "clip_ratio_c": 10.0,
            "use_kl_loss": True,
            "kl_loss_coef": 0.001,
            "kl_loss_type": "low_var_kl",
            "entropy_coeff": 0.001,
            "ppo_epochs": 2,
            "ppo_mini_batch_size": 64,  # = train_batch_size: one optimizer step per batch, as here
            "optim": {
                "lr": 1e-6,
                "lr_warmup_steps": -1,
                "weight_decay": 0.1,
                "lr_scheduler_type": "cosine",
                "betas": [0.9, 0.95],
            },
            "grad_clip": 1.0,
            "ppo_micro_batch_size_per_gpu": 4,  # ignored: memory only
        },
        "rollout": {
            "n": 8,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "tensor_model_parallel_size": 2,
            "val_kwargs": {"n": 4, "temperature": 0.6},
        },
    },
    "data": {
        "train_batch_size": 64,
        "max_prompt_length": 512,
        "max_response_length": 1024,
        "train_files": ["gsm8k/train.parquet"],
    },
    "trainer": {"total_training_steps": 100, "n_gpus_per_node": 8, "save_freq": -1, "test_freq": 10},
}


def test_a_verl_config_maps_estimator_aggregation_clip_kl_optimizer_and_lora() -> None:
    out = convert(VERL, "verl")
    assert out.options == {
        "advantage_estimator": "outcome",
        "scale_rewards": "none",  # norm_adv_by_std_in_grpo: false is Dr. GRPO's advantage
        "loss_type": "dr_grpo",
        "importance_sampling_level": "sequence_token",
        "epsilon": 0.0003,  # clip_ratio_low wins over clip_ratio
        "epsilon_high": 0.0004,
        "delta": 10.0,
        "beta": 0.001,
        "entropy_coeff": 0.001,
        "num_iterations": 2,
        "learning_rate": 1e-6,
        "weight_decay": 0.1,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "warmup_steps": 0,
        "lr_scheduler_type": "cosine",
        "max_grad_norm": 1.0,
        "num_generations": 8,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "eval_temperature": 0.6,
        "eval_num_generations": 4,
        "model_name_or_path": "Qwen/Qwen2.5-0.5B",
        "gradient_checkpointing": True,  # verl's default, not set above
        "use_peft": True,
        "lora_r": 32,
        "lora_alpha": 64,
        "lora_target_modules": ["all-linear"],
        "prompt_batch_size": 64,
        "max_prompt_length": 512,
        "max_completion_length": 1024,
        "train_data": "gsm8k/train.parquet",
        "max_steps": 100,
        "save_steps": 0,
        "eval_steps": 10,
    }
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in out.report["ignored"]
    assert [r.split(":")[0] for r in out.report["defaulted"]] == [
        "actor_rollout_ref.model.enable_gradient_checkpointing"
    ]
    config_from_dict(out.options)  # valid as it stands


def test_a_partial_verl_config_takes_verls_defaults() -> None:
    """An override file, as Hydra users write them: the rest is verl's ``ppo_trainer.yaml``, not ours."""
    out = convert({"algorithm": {"adv_estimator": "rloo"}, "actor_rollout_ref": {"rollout": {"n": 4}}}, "verl")
    assert out.options == {
        "advantage_estimator": "rloo",
        "delta": 3.0,  # dual clip is on in verl
        "weight_decay": 0.01,
        "lr_scheduler_type": "constant",  # ours decays linearly
        "num_generations": 4,
        "gradient_checkpointing": True,
    }
    kept = [r.split(":")[0] for r in out.report["defaulted"] if "is kept" in r]
    assert kept == ["trainer.total_training_steps", "data.train_batch_size"]  # rollout.n is set


@pytest.mark.parametrize(
    ("mode", "loss_type"),
    [
        ("token-mean", "dapo"),
        ("seq-mean-token-mean", "grpo"),
        ("seq-mean-token-sum-norm", "dr_grpo"),
        ("seq-mean-token-sum", "luspo"),
    ],
)
def test_each_verl_aggregation_is_one_of_our_loss_types(mode: str, loss_type: str) -> None:
    out = convert(_nested("actor_rollout_ref.actor.loss_agg_mode", mode), "verl")
    assert out.options["loss_type"] == loss_type
    assert config_from_dict({**out.options, **NEEDED}).loss_type == loss_type


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        ("algorithm.adv_estimator", "gae", "grpo"),
        ("algorithm.use_kl_in_reward", True, "set beta"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "cispo", "gspo"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "geo_mean", "kl_cov"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", 16, "one optimizer step per generated batch"),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", 0.1, "set warmup_steps"),
        ("actor_rollout_ref.actor.optim.lr_scheduler_type", "wsd", "the schedules here are"),
        ("actor_rollout_ref.actor.kl_loss_type", "mse", "only k3"),
        ("algorithm.rollout_correction.rollout_is", "token", "vllm_importance_sampling_mode"),
        ("trainer.total_epochs", 15, "set trainer.total_training_steps"),
    ],
)
def test_a_verl_option_we_lack_is_an_error(path: str, value: object, says: str) -> None:
    src = _nested(path, value)
    if path.endswith("kl_loss_type"):
        _nested("actor_rollout_ref.actor.use_kl_loss", True, src)
    if path.endswith("ppo_mini_batch_size"):
        _nested("data.train_batch_size", 64, src)
    with pytest.raises(ConfigError, match=says):
        convert(src, "verl")


def test_verls_kl_cov_maps_with_its_options_after_the_aggregation() -> None:
    actor = {
        "loss_agg_mode": "token-mean",
        "policy_loss": {"loss_mode": "kl_cov", "kl_cov_ratio": 0.002, "ppo_kl_coef": 0.5},
    }
    out = convert({"actor_rollout_ref": {"actor": actor}}, "verl")
    assert {k: out.options[k] for k in ("loss_type", "kl_cov_ratio", "ppo_kl_coef")} == {
        "loss_type": "kl_cov",
        "kl_cov_ratio": 0.002,
        "ppo_kl_coef": 0.5,
    }
    actor["loss_agg_mode"] = "seq-mean-token-mean"
    with pytest.raises(ConfigError, match="aggregates as token-mean"):
        convert({"actor_rollout_ref": {"actor": actor}}, "verl")


# ---------------------------------------------------------------------------------------------------- the table


def test_the_table_is_one_rule_per_source_option_naming_real_options_of_ours() -> None:
    keys = [(r.origin, r.source) for r in RULES]
    assert len(keys) == len(set(keys)), "a source option with two rules: one would be silently dropped"
    for r in RULES:
        assert r.note, r.source
        if r.kind == "mapped":
            assert r.ours in OURS and r.apply is not None, r.source
        elif r.kind == "refused":
            assert r.ours in OURS | {""} and r.neutral is not None, r.source
    # every source default is a rule's, and used only where it differs from our own default
    for origin, defaults in SOURCE_DEFAULTS.items():
        rules = {r.source: r for r in RULES if r.origin == origin}
        for source, value in defaults.items():
            assert rules[source].kind == "mapped", source
            assert rules[source].apply(value, defaults) != {  # type: ignore[misc]
                rules[source].ours: getattr(GRPOConfig, rules[source].ours)
            }, source


def test_flatten_and_the_docs_table() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}
    table = rules_table()
    for r in RULES:
        assert f"| `{r.source}` |" in table, r.source
    assert "| verl | `algorithm.adv_estimator` | mapped | `advantage_estimator` |" in table
    assert "| TRL | `steps_per_generation` | refused | `num_iterations` |" in table
    assert "| verl | `actor_rollout_ref.actor.entropy_coeff` | mapped | `entropy_coeff` |" in table
    assert "**Unset: TRL's default `True`.**" in table  # use_bias_correction_kl


# ---------------------------------------------------------------------------------------------------- fix-its


@pytest.mark.parametrize("rule", [r for r in RULES if r.source not in OURS], ids=lambda r: f"{r.origin}:{r.source}")
def test_every_trl_or_verl_name_in_our_yaml_gets_a_fix_it_naming_ours(rule: Any) -> None:
    """The loader answers each source name with our option (mapped), why not and the nearest (refused), or that
    it does nothing (ignored), from the same rule the converter applies."""
    with pytest.raises(ConfigError) as err:
        config_from_dict({**NEEDED, rule.source: 1})
    message = str(err.value)
    who = {"trl": "TRL", "verl": "verl"}[rule.origin]
    assert message.startswith(f"option {rule.source!r} in config ")
    if rule.kind == "mapped":
        assert f"is {who}'s name; ours is {rule.ours}" in message
    elif rule.kind == "refused":
        assert f"is not supported ({who}'s option): {rule.note}" in message
        assert not rule.ours or f"nearest option: {rule.ours}" in message
    else:
        assert f"has no effect here ({who}'s option): {rule.note}; remove it" in message


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("kl_loss_coef", "is verl's name, actor_rollout_ref.actor.kl_loss_coef; ours is beta"),
        ("clip_ratio_c", "is verl's name, actor_rollout_ref.actor.clip_ratio_c; ours is delta (dual-clip PPO's"),
        ("loss_agg_mode", "ours is loss_type (token-mean -> dapo, seq-mean-token-mean -> grpo"),
        ("adv_estimator", "ours is advantage_estimator (grpo -> outcome; rloo"),
        ("ppo_epochs", "is verl's name, actor_rollout_ref.actor.ppo_epochs; ours is num_iterations"),
    ],
)
def test_a_verl_leaf_name_is_answered_with_its_path_and_ours(key: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^option") as err:
        config_from_dict({**NEEDED, key: 0.1})
    assert says in str(err.value)


def test_other_unknown_names_get_the_closest_spelling() -> None:
    assert foreign_hint("num_generation") is None and foreign_hint("n") is None  # too vague to be verl's
    with pytest.raises(ConfigError, match=r"unknown option 'num_generation' in config. Did you mean 'num_generations'"):
        config_from_dict({**NEEDED, "num_generation": 4})
    with pytest.raises(ConfigError, match=r"unknown option 'epsilonn' in config. Did you mean 'epsilon'"):
        config_from_dict({**NEEDED, "epsilonn": 0.2})
    with pytest.raises(ConfigError, match=r"Did you mean 'num_generations'"):
        config_from_dict({**NEEDED, "group_size": 8})  # another trainer's name, not TRL's or verl's


# ---------------------------------------------------------------------------------------------------- command


def _convert(src: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer", "convert", str(src), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_the_convert_command(tmp_path: Path) -> None:
    src = tmp_path / "trl.json"
    src.write_text(json.dumps({"beta": 0.04, "num_generations": 4, "per_device_train_batch_size": 8, "max_steps": 9}))
    run = _convert(src, "--from", "trl")
    assert run.returncode == 0, run.stderr
    out = yaml.safe_load(run.stdout)
    assert {k: out[k] for k in ("beta", "num_generations", "prompt_batch_size", "max_steps")} == {
        "beta": 0.04,
        "num_generations": 4,
        "prompt_batch_size": 2,
        "max_steps": 9,
    }
    assert out["use_bias_correction_kl"] is True
    assert "# mapped: num_generations; beta; per_device_train_batch_size; max_steps" in run.stderr  # rules' order
    assert "# defaulted (not set in the source):\n#   use_bias_correction_kl: TRL's default True" in run.stderr
    target = tmp_path / "ours.yaml"
    assert _convert(src, "--from", "trl", "-o", str(target)).returncode == 0
    assert yaml.safe_load(target.read_text()) == out
    src.write_text(json.dumps({"steps_per_generation": 4}))
    bad = _convert(src, "--from", "trl")
    assert bad.returncode == 2 and "steps_per_generation=4" in bad.stderr and "Traceback" not in bad.stderr
