"""verl's options (dotted paths in ``ppo_trainer.yaml``), each with its rule (:mod:`trainer.config.foreign`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainer.config.checks import ConfigError
from trainer.config.commands import GRPOConfig
from trainer.config.foreign.rule import (
    Apply,
    Origin,
    Rule,
    fail,
    lr_scheduler,
    mapped,
    refused,
    refused_if,
    rule,
)

_ESTIMATORS = {
    "grpo": "outcome",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_plus_plus",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
}
#: verl's ``loss_agg_mode`` onto our ``loss_type`` (the clipped surrogate aggregated the same way).
LOSS_AGG_MODES = {
    "token-mean": "dapo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum-norm": "dr_grpo",
    "seq-mean-token-sum": "luspo",
}
_LOSS_MODES = {
    "vanilla": {},
    "gspo": {"importance_sampling_level": "sequence_token"},
    "kl_cov": {"loss_type": "kl_cov"},  # aggregated as token-mean (dapo), verl's default
    "clip_cov": {"loss_type": "clip_cov"},
}
_FILTER_METRICS = {
    "acc": "accuracy",
    "score": "reward",
    "seq_reward": "reward",
    "seq_final_reward": "reward",
    "reward": "reward",
}


def _pick(table: Mapping[str, Any], name: str, option: str) -> Apply:
    def apply(value: Any, _src: Mapping[str, Any]) -> dict[str, Any]:
        if value not in table:
            raise ConfigError(f"{option}={value!r} has no counterpart here; the ones that do: {sorted(table)}")
        out = table[value]
        return dict(out) if isinstance(out, dict) else {name: out}

    return apply


def _verl_estimator(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(_ESTIMATORS, "advantage_estimator", "algorithm.adv_estimator")(value, src)
    if value == "grpo" and src.get("algorithm.norm_adv_by_std_in_grpo") is False:
        out["scale_rewards"] = "none"  # Dr. GRPO's advantage
    return out


def _verl_loss_mode(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(_LOSS_MODES, "", "policy_loss.loss_mode")(value, src)
    agg = src.get(A + "loss_agg_mode", "token-mean")
    if "loss_type" in out and agg != "token-mean":
        raise ConfigError(f"policy_loss.loss_mode={value!r} aggregates as token-mean here, not {agg!r}")
    return out


def _verl_beta(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    kind = src.get(A + "kl_loss_type", "low_var_kl")
    if value and kind not in ("low_var_kl", "k3"):
        raise ConfigError(f"actor_rollout_ref.actor.kl_loss_type={kind!r}: only k3 (low_var_kl) is built")
    return {"beta": float(src.get(A + "kl_loss_coef", 0.001)) if value else 0.0}


def _verl_lora(value: Any, _src: Mapping[str, Any]) -> dict[str, Any]:
    return {"use_peft": False} if not value else {"use_peft": True, "lora_r": int(value)}


def _with_lora(ours: str, translate: Callable[[Any], Any] = lambda v: v) -> Apply:
    return lambda v, s: {ours: translate(v)} if (s.get("actor_rollout_ref.model.lora_rank") or 0) > 0 else {}


def _with_filter(ours: str, translate: Callable[[Any], Any]) -> Apply:
    return lambda v, s: {ours: translate(v)} if s.get("algorithm.filter_groups.enable") else {}


def _steps(ours: str) -> Apply:
    """verl's ``-1`` (never) is our ``0``."""
    return lambda v, s: {} if v is None else {ours: max(int(v), 0)}


A = VERL_ACTOR = "actor_rollout_ref.actor."
R = VERL_ROLLOUT = "actor_rollout_ref.rollout."
V: Origin = "verl"
VERL: tuple[Rule, ...] = (
    rule(
        V,
        "algorithm.adv_estimator",
        "advantage_estimator",
        "advantage_estimator: grpo -> outcome; rloo, reinforce_plus_plus, reinforce_plus_plus_baseline the same; "
        "gae and the rest refused (no value model)",
        _verl_estimator,
    ),
    rule(
        V,
        "algorithm.norm_adv_by_std_in_grpo",
        "scale_rewards",
        "false: scale_rewards none (read with adv_estimator)",
        lambda v, s: {},
    ),
    refused(V, "algorithm.use_kl_in_reward", "beta", "the KL is a loss term here: set beta (actor.use_kl_loss)", False),
    refused(V, "algorithm.use_pf_ppo", "", "no prioritised-replay reweighting of the batch", False),
    refused(
        V,
        "algorithm.rollout_correction.rollout_is",
        "vllm_importance_sampling_mode",
        "use vllm_importance_sampling_mode and _cap",
        None,
    ),
    refused(
        V,
        "algorithm.rollout_correction.rollout_rs",
        "vllm_importance_sampling_mode",
        "use vllm_importance_sampling_mode (the *_mask modes reject)",
        None,
    ),
    rule(
        V,
        "algorithm.filter_groups.enable",
        "dynamic_sampling",
        "dynamic_sampling (DAPO)",
        lambda v, s: {"dynamic_sampling": bool(v)},
    ),
    rule(
        V,
        "algorithm.filter_groups.metric",
        "dynamic_sampling_metric",
        "with enable: acc -> accuracy; score, seq_reward, seq_final_reward -> reward",
        _with_filter(
            "dynamic_sampling_metric",
            lambda v: _FILTER_METRICS.get(v) or fail("filter_groups.metric", v, "use acc or score"),
        ),
    ),
    rule(
        V,
        "algorithm.filter_groups.max_num_gen_batches",
        "max_num_gen_batches",
        "with enable; verl's 0 (no limit) keeps ours: 10",
        _with_filter("max_num_gen_batches", lambda v: v or GRPOConfig.max_num_gen_batches),
    ),
    rule(
        V,
        A + "loss_agg_mode",
        "loss_type",
        "loss_type: " + ", ".join(f"{k} -> {v}" for k, v in LOSS_AGG_MODES.items()),
        _pick(LOSS_AGG_MODES, "loss_type", "loss_agg_mode"),
    ),
    rule(
        V,
        A + "policy_loss.loss_mode",
        "loss_type",
        "vanilla -> the clipped surrogate; gspo -> importance_sampling_level sequence_token; kl_cov and clip_cov "
        "the same (with loss_agg_mode token-mean); others refused (verl's cispo clips the weight on both sides: "
        "another weight than TRL's)",
        _verl_loss_mode,
    ),
    *(
        mapped(V, A + f"policy_loss.{name}", name, name, float)
        for name in ("kl_cov_ratio", "ppo_kl_coef", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
    ),
    refused(V, A + "policy_loss.dro_beta", "", "no DRO objective", None),
    rule(
        V,
        A + "clip_ratio",
        "epsilon",
        "epsilon (where clip_ratio_low is not set)",
        lambda v, s: {} if s.get(A + "clip_ratio_low") is not None else {"epsilon": v},
    ),
    mapped(V, A + "clip_ratio_low", "epsilon"),
    mapped(V, A + "clip_ratio_high", "epsilon_high"),
    mapped(
        V,
        A + "clip_ratio_c",
        "delta",
        "delta (dual-clip PPO's bound for negative advantages; verl's default 3.0 is on)",
        float,
    ),
    mapped(V, A + "tau_pos", "sapo_temperature_pos", "sapo_temperature_pos", float),
    mapped(V, A + "tau_neg", "sapo_temperature_neg", "sapo_temperature_neg", float),
    refused(V, A + "loss_scale_factor", "max_completion_length", "dr_grpo divides by max_completion_length", None),
    rule(V, A + "use_kl_loss", "beta", "beta = kl_loss_coef when true, else 0", _verl_beta),
    rule(V, A + "kl_loss_coef", "beta", "used when use_kl_loss is true", lambda v, s: {}),
    rule(V, A + "kl_loss_type", "beta", "low_var_kl and k3 are our k3 KL; others refused", lambda v, s: {}),
    mapped(V, A + "ppo_epochs", "num_iterations"),
    refused_if(
        V,
        A + "ppo_mini_batch_size",
        "num_iterations",
        "one optimizer step per generated batch here: set it to data.train_batch_size (gradient_accumulation_steps "
        "splits the step for memory; num_iterations reuses the batch)",
        lambda v, s: v is None or v == s.get("data.train_batch_size"),
    ),
    mapped(V, A + "optim.lr", "learning_rate", "learning_rate", float),
    mapped(V, A + "optim.weight_decay", "weight_decay", "weight_decay", float),
    rule(
        V,
        A + "optim.betas",
        "adam_beta1",
        "adam_beta1, adam_beta2",
        lambda v, s: {} if v is None else {"adam_beta1": float(v[0]), "adam_beta2": float(v[1])},
    ),
    rule(
        V,
        A + "optim.lr_warmup_steps",
        "warmup_steps",
        "warmup_steps (verl's -1: none)",
        lambda v, s: {"warmup_steps": max(int(v), 0)},
    ),
    refused_if(
        V,
        A + "optim.lr_warmup_steps_ratio",
        "warmup_steps",
        "set warmup_steps (lr_warmup_steps)",
        lambda v, s: not v or (s.get(A + "optim.lr_warmup_steps") or -1) > 0,
    ),
    mapped(
        V,
        A + "optim.lr_scheduler_type",
        "lr_scheduler_type",
        "constant and cosine the same",
        lr_scheduler("optim.lr_scheduler_type"),
    ),
    mapped(
        V,
        A + "optim.warmup_style",
        "lr_scheduler_type",
        "older spelling of optim.lr_scheduler_type",
        lr_scheduler("optim.warmup_style"),
    ),
    refused(V, A + "optim.min_lr_ratio", "lr_scheduler_type", "the schedules decay to 0", None, 0.0),
    refused(V, A + "optim.num_cycles", "lr_scheduler_type", "cosine is half a cycle, to 0", None, 0.5),
    refused(V, A + "optim.optimizer", "learning_rate", "the optimizer is torch's AdamW", None, "AdamW"),
    mapped(V, A + "grad_clip", "max_grad_norm", "max_grad_norm", float),
    mapped(V, A + "optim.clip_grad", "max_grad_norm", "max_grad_norm (newer spelling of grad_clip)", float),
    mapped(V, R + "n", "num_generations"),
    mapped(V, R + "temperature", "temperature", "temperature", float),
    mapped(V, R + "top_p", "top_p", "top_p", float),
    rule(V, R + "top_k", "top_k", "top_k (verl's -1: off, our 0)", lambda v, s: {"top_k": max(int(v), 0)}),
    refused(V, R + "do_sample", "temperature", "training samples; evaluation is greedy at eval_temperature 0", True),
    mapped(V, R + "val_kwargs.temperature", "eval_temperature", "eval_temperature", float),
    mapped(V, R + "val_kwargs.n", "eval_num_generations"),
    mapped(V, "actor_rollout_ref.model.path", "model_name_or_path"),
    mapped(V, "actor_rollout_ref.model.enable_gradient_checkpointing", "gradient_checkpointing"),
    rule(V, "actor_rollout_ref.model.lora_rank", "lora_r", "use_peft and lora_r (0: full fine-tuning)", _verl_lora),
    rule(
        V,
        "actor_rollout_ref.model.lora_alpha",
        "lora_alpha",
        "lora_alpha (with lora_rank > 0)",
        _with_lora("lora_alpha"),
    ),
    rule(
        V,
        "actor_rollout_ref.model.target_modules",
        "lora_target_modules",
        "lora_target_modules (with lora_rank > 0)",
        _with_lora("lora_target_modules", lambda v: [v] if isinstance(v, str) else list(v)),
    ),
    mapped(V, "data.train_batch_size", "prompt_batch_size", "prompt_batch_size (prompts per step)"),
    refused_if(
        V,
        "data.gen_batch_size",
        "max_num_gen_batches",
        "dynamic sampling draws prompt_batch_size prompts a round (max_num_gen_batches rounds)",
        lambda v, s: v is None or v == s.get("data.train_batch_size"),
    ),
    mapped(V, "data.max_prompt_length", "max_prompt_length"),
    mapped(V, "data.max_response_length", "max_completion_length"),
    mapped(
        V,
        "data.train_files",
        "train_data",
        "train_data (one file)",
        lambda v: v[0] if isinstance(v, list | tuple) else v,
    ),
    mapped(
        V, "data.val_files", "eval_data", "eval_data (one file)", lambda v: v[0] if isinstance(v, list | tuple) else v
    ),
    mapped(V, "data.prompt_key", "prompt_column"),
    rule(
        V, "trainer.total_training_steps", "max_steps", "max_steps", lambda v, s: {} if v is None else {"max_steps": v}
    ),
    refused_if(
        V,
        "trainer.total_epochs",
        "max_steps",
        "training length is set in steps: set trainer.total_training_steps (max_steps)",
        lambda v, s: s.get("trainer.total_training_steps") is not None,
    ),
    rule(V, "trainer.save_freq", "save_steps", "save_steps (verl's -1: never, our 0)", _steps("save_steps")),
    rule(V, "trainer.test_freq", "eval_steps", "eval_steps (verl's -1: never, our 0)", _steps("eval_steps")),
    mapped(V, "trainer.max_actor_ckpt_to_keep", "save_total_limit"),
    mapped(V, A + "entropy_coeff", "entropy_coeff", "the same bonus, aggregated as the loss (tested equal)", float),
)
