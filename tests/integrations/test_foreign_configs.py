"""The real packages' own configs carried over (issue 22 D6): TRL 1.16's ``GRPOConfig(...).to_dict()`` and verl's
generated ``ppo_trainer.yaml``, each converted by ``trainer.config.foreign`` and validated as our config."""

from __future__ import annotations

from pathlib import Path

import pytest
import verl
import yaml
from trl import GRPOConfig as TRLConfig

from trainer.config import ConfigError, config_from_dict
from trainer.config.foreign import TRL_RULES, convert

VERL_YAML = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"


def _trl(**kw: object) -> dict:
    return TRLConfig(output_dir="/tmp/rlvr-trl", use_cpu=True, bf16=False, **kw).to_dict()


def test_trls_default_config_maps_with_trls_defaults() -> None:
    src = _trl(max_steps=20)
    out = convert(src, "trl")
    cfg = config_from_dict({**out.options, "model_name_or_path": "m", "train_data": "d"})
    # TRL's values, where ours differ: the KL bias correction and gradient checkpointing are on in TRL
    assert cfg.use_bias_correction_kl is src["use_bias_correction_kl"] is True
    assert cfg.gradient_checkpointing is src["gradient_checkpointing"] is True
    assert (cfg.learning_rate, cfg.loss_type, cfg.beta) == (src["learning_rate"], src["loss_type"], src["beta"])
    # 8 completions per device and step, 8 generations: one prompt per step
    assert cfg.prompt_batch_size == src["generation_batch_size"] // src["num_generations"] == 1
    # every option with a rule is accounted for, and every other is mapped by name or ignored
    reported = {k.split(":")[0] for v in out.report.values() for k in v}
    assert reported == set(src)
    for rule in TRL_RULES:
        if rule.source in src:
            assert rule.source in reported


def test_a_trl_recipe_carries_over() -> None:
    src = _trl(
        max_steps=50,
        learning_rate=3e-6,
        beta=0.04,
        num_generations=4,
        per_device_train_batch_size=16,
        loss_type="grpo",
        scale_rewards="batch",
        importance_sampling_level="sequence",
        epsilon=3e-4,
        epsilon_high=4e-4,
        top_entropy_quantile=0.2,
        mask_truncated_completions=True,
        num_iterations=2,
        gradient_accumulation_steps=2,
    )
    cfg = config_from_dict({**convert(src, "trl").options, "model_name_or_path": "m", "train_data": "d"})
    assert cfg.prompt_batch_size == 16 * 2 // 4  # steps_per_generation defaults to gradient_accumulation_steps
    for name in (
        "learning_rate",
        "beta",
        "num_generations",
        "loss_type",
        "scale_rewards",
        "epsilon",
        "epsilon_high",
        "importance_sampling_level",
        "top_entropy_quantile",
        "mask_truncated_completions",
        "num_iterations",
        "gradient_accumulation_steps",
    ):
        assert getattr(cfg, name) == src[name], name


def test_trl_options_with_an_effect_we_lack_are_refused() -> None:
    with pytest.raises(ConfigError, match="steps_per_generation=4"):
        convert(_trl(max_steps=5, steps_per_generation=4), "trl")
    with pytest.raises(ConfigError, match="max_steps=-1"):
        convert(_trl(), "trl")  # TRL trains by epochs unless max_steps is set


def test_verls_generated_config_maps_once_its_estimator_is_grpo() -> None:
    src = yaml.safe_load(VERL_YAML.read_text())
    with pytest.raises(ConfigError, match="adv_estimator='gae'"):  # verl's default is PPO with a critic
        convert(src, "verl")
    src["algorithm"]["adv_estimator"] = "grpo"
    src["actor_rollout_ref"]["rollout"]["n"] = 8
    src["actor_rollout_ref"]["actor"]["use_kl_loss"] = True
    out = convert(src, "verl")
    cfg = config_from_dict(out.options)
    actor = src["actor_rollout_ref"]["actor"]
    assert cfg.advantage_estimator == "outcome" and cfg.scale_rewards == "group"
    assert cfg.loss_type == {"token-mean": "dapo"}[actor["loss_agg_mode"]]
    assert (cfg.epsilon, cfg.epsilon_high, cfg.delta) == (
        actor["clip_ratio_low"],
        actor["clip_ratio_high"],
        actor["clip_ratio_c"],
    )
    assert cfg.beta == actor["kl_loss_coef"] and cfg.num_iterations == actor["ppo_epochs"]
    assert cfg.learning_rate == actor["optim"]["lr"] and cfg.num_generations == 8
    assert cfg.prompt_batch_size == src["data"]["train_batch_size"]
    assert cfg.max_completion_length == src["data"]["max_response_length"]
