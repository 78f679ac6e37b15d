"""The real packages' own configs carried over (issue 22 D6): TRL 1.16's ``GRPOConfig(...).to_dict()`` and verl's
generated ``ppo_trainer.yaml``, each converted by ``trainer.config.conversion`` and validated as our config; the
table's "source defaults" read from both packages."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import verl
import yaml
from transformers import TrainingArguments
from trl import GRPOConfig as TRLConfig

from trainer.config import ConfigError, GRPOConfig, config_from_dict
from trainer.config.conversion import convert, flatten
from trainer.config.foreign import RULES, SOURCE_DEFAULTS

VERL_YAML = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
NEEDED = {"model_name_or_path": "m", "train_data": "d"}
OURS = {f.name for f in dataclasses.fields(GRPOConfig)}


def _trl(**kw: object) -> dict:
    return TRLConfig(output_dir="/tmp/rlvr-trl", use_cpu=True, bf16=False, **kw).to_dict()


def _rules(origin: str) -> dict[str, Any]:
    return {r.source: r for r in RULES if r.origin == origin}


# ---------------------------------------------------------------------------------------------------- TRL


def test_every_grpo_option_of_trl_has_a_rule_and_trls_defaults_are_trls() -> None:
    """TRL's own GRPO options (not the generic TrainingArguments) each have a rule or are ours by name, so none is
    silently ignored; the table's TRL defaults are the package's."""
    generic = {f.name for f in dataclasses.fields(TrainingArguments)}
    grpo_own = {f.name for f in dataclasses.fields(TRLConfig)} - generic
    rules = _rules("trl")
    assert sorted(grpo_own - set(rules) - OURS) == []
    fields = {f.name: f for f in dataclasses.fields(TRLConfig)}
    for name, value in SOURCE_DEFAULTS["trl"].items():
        assert fields[name].default == value, name


def test_trls_default_config_maps_with_trls_defaults() -> None:
    src = _trl(max_steps=20)
    out = convert(src, "trl")
    cfg = config_from_dict({**out.options, **NEEDED})
    # TRL's values, where ours differ: the KL bias correction and gradient checkpointing are on in TRL
    assert cfg.use_bias_correction_kl is src["use_bias_correction_kl"] is True
    assert cfg.gradient_checkpointing is src["gradient_checkpointing"] is True
    assert cfg.disable_dropout is src["disable_dropout"] is False
    assert cfg.vllm_importance_sampling_mode == src["vllm_importance_sampling_mode"] == "sequence_mask"
    assert cfg.vllm_importance_sampling_cap == src["vllm_importance_sampling_clip_max"]
    assert (cfg.learning_rate, cfg.loss_type, cfg.beta) == (src["learning_rate"], src["loss_type"], src["beta"])
    # 8 completions per device and step, 8 generations: one prompt per step
    assert cfg.prompt_batch_size == src["generation_batch_size"] // src["num_generations"] == 1
    # every option is accounted for: a full to_dict() leaves nothing to default
    reported = {k.split(":")[0] for v in out.report.values() for k in v}
    assert reported == set(src) and out.report["defaulted"] == []


#: The TRL options a recipe sets, each with a value other than TRL's default, and the value we must end with.
TRL_RECIPE: dict[str, tuple[Any, Any]] = {
    "learning_rate": (3e-6, 3e-6),
    "num_generations": (4, 4),
    "beta": (0.04, 0.04),
    "epsilon": (3e-4, 3e-4),
    "epsilon_high": (4e-4, 4e-4),
    "delta": (4.0, 4.0),
    "loss_type": ("grpo", "grpo"),
    "importance_sampling_level": ("sequence", "sequence"),
    "scale_rewards": ("batch", "batch"),
    "num_iterations": (2, 2),
    "max_completion_length": (256, 256),
    "temperature": (0.9, 0.9),
    "top_p": (0.95, 0.95),
    "top_k": (50, 50),
    "gradient_accumulation_steps": (2, 2),
    "mask_truncated_completions": (True, True),
    "top_entropy_quantile": (0.2, 0.2),
    "off_policy_mask_threshold": (0.5, 0.5),
    "max_steps": (50, 50),
    "seed": (7, 7),
    "warmup_steps": (5, 5),
    "lr_scheduler_type": ("cosine", "cosine"),
    "num_generations_eval": (2, 2),
    "vllm_importance_sampling_clip_max": (2.0, 2.0),
}


def test_a_trl_recipe_carries_over_field_by_field() -> None:
    src = _trl(per_device_train_batch_size=16, **{k: v for k, (v, _) in TRL_RECIPE.items()})
    out = convert(src, "trl")
    cfg = config_from_dict({**out.options, **NEEDED})
    rules = _rules("trl")
    for name, (_, expected) in TRL_RECIPE.items():
        rule = rules[name]
        assert name in out.report["mapped"], name
        assert getattr(cfg, rule.ours) == expected, name
    assert cfg.prompt_batch_size == 16 * 2 // 4  # steps_per_generation defaults to gradient_accumulation_steps


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"steps_per_generation": 4}, "steps_per_generation=4: one optimizer step per generated batch"),
        ({"max_steps": -1}, "max_steps=-1: set max_steps"),  # TRL trains by epochs unless max_steps is set
        ({"warmup_ratio": 0.1}, "warmup_ratio=0.1: use warmup_steps"),
        ({"repetition_penalty": 1.1}, "repetition_penalty=1.1: sampling is kept plain"),
        ({"entropy_coef": 0.01}, "entropy_coef=0.01: use entropy_coeff"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "summed, then normalised per group"),
    ],
)
def test_trl_options_with_an_effect_we_lack_are_refused_with_a_reason(kw: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        convert(_trl(**{"max_steps": 5, **kw}), "trl")


# ---------------------------------------------------------------------------------------------------- verl


def _verl() -> dict:
    return yaml.safe_load(VERL_YAML.read_text())


def test_verls_defaults_in_the_table_are_verls() -> None:
    flat = flatten(_verl())
    for path, value in SOURCE_DEFAULTS["verl"].items():
        assert flat[path] == value, path
    # where verl's default has no counterpart, ours is kept, and the note says what verl's was
    assert flat["trainer.total_training_steps"] is None  # epochs
    assert (flat["data.train_batch_size"], flat["actor_rollout_ref.actor.ppo_mini_batch_size"]) == (1024, 256)
    assert flat["actor_rollout_ref.rollout.n"] == 1


def test_verls_generated_config_is_refused_where_it_trains_something_else() -> None:
    with pytest.raises(ConfigError) as err:
        convert(_verl(), "verl")
    message = str(err.value)
    assert "adv_estimator='gae'" in message  # verl's default is PPO with a critic
    assert "ppo_mini_batch_size=256: one optimizer step per generated batch" in message  # 4 updates per batch
    assert "trainer.total_epochs=30: training length is set in steps" in message


#: verl paths a GRPO recipe sets, each with the value it gets below (or the generated YAML's), and our option's.
VERL_RECIPE: dict[str, tuple[Any, str, Any]] = {
    "algorithm.adv_estimator": ("grpo", "advantage_estimator", "outcome"),
    "actor_rollout_ref.actor.loss_agg_mode": ("seq-mean-token-mean", "loss_type", "grpo"),
    "actor_rollout_ref.actor.clip_ratio_low": (0.2, "epsilon", 0.2),
    "actor_rollout_ref.actor.clip_ratio_high": (0.28, "epsilon_high", 0.28),
    "actor_rollout_ref.actor.clip_ratio_c": (3.0, "delta", 3.0),
    "actor_rollout_ref.actor.use_kl_loss": (True, "beta", 0.001),  # kl_loss_coef from the YAML
    "actor_rollout_ref.actor.ppo_epochs": (2, "num_iterations", 2),
    "actor_rollout_ref.actor.optim.lr": (1e-6, "learning_rate", 1e-6),
    "actor_rollout_ref.actor.optim.weight_decay": (0.01, "weight_decay", 0.01),
    "actor_rollout_ref.actor.optim.lr_scheduler_type": ("constant", "lr_scheduler_type", "constant"),
    "actor_rollout_ref.actor.grad_clip": (1.0, "max_grad_norm", 1.0),
    "actor_rollout_ref.rollout.n": (8, "num_generations", 8),
    "actor_rollout_ref.rollout.temperature": (1.0, "temperature", 1.0),
    "actor_rollout_ref.rollout.top_k": (-1, "top_k", 0),
    "data.train_batch_size": (256, "prompt_batch_size", 256),
    "data.max_response_length": (1024, "max_completion_length", 1024),
    "trainer.total_training_steps": (100, "max_steps", 100),
}


def test_verls_generated_config_carries_over_field_by_field() -> None:
    src = _verl()
    for path, (value, _, _) in VERL_RECIPE.items():
        node = src
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    src["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = src["data"]["train_batch_size"]
    out = convert(src, "verl")
    cfg = config_from_dict(out.options)
    for path, (_, ours, expected) in VERL_RECIPE.items():
        assert path in out.report["mapped"], path
        assert getattr(cfg, ours) == expected, path
    assert cfg.beta == src["actor_rollout_ref"]["actor"]["kl_loss_coef"]
    # verl's entropy bonus carries over as ours; total_epochs is dropped (steps are set) with its reason
    assert "actor_rollout_ref.actor.entropy_coeff" in out.report["mapped"]
    assert cfg.entropy_coeff == src["actor_rollout_ref"]["actor"]["entropy_coeff"]
    refused = dict(r.split(": ", 1) for r in out.report["refused"])
    assert refused["trainer.total_epochs"].startswith("training length is set in steps")
