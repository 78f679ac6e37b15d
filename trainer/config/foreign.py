"""A config from TRL or verl, carried over: ONE table of rules (:data:`RULES`), read by ``python -m trainer
convert``, by the config loader (a TRL or verl name in our YAML gets a fix-it naming our option) and rendered into
``docs/trainer/from_trl_verl.md`` (``docs/hooks/reference.py``), so the docs and the code cannot drift. The
machinery that applies them is :mod:`trainer.config.conversion`.

Each rule names a source option (TRL 1.16 ``GRPOConfig``: its name; verl: its dotted path in ``ppo_trainer.yaml``,
``algorithm.adv_estimator``, ``actor_rollout_ref.actor.loss_agg_mode``) and says what becomes of it:

* **mapped**: it sets one of our options, with its value translated where the two spell it differently;
* **refused**: we have no counterpart. A refused option whose value is *neutral* (its default, or a value that
  changes nothing) is reported and dropped; any other value is an error naming our nearest option, since
  dropping it would silently train something else;
* **ignored**: it changes no training math (logging, the hub, hardware placement, parallelism).

Where the source's default differs from ours and the source does not set the option (a hand-written TRL dict, a
verl override file), the source's default is used and the report says so (:data:`SOURCE_DEFAULTS`): a TRL user
who leaves ``use_bias_correction_kl`` out gets TRL's ``true``, not our ``false``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainer.config.checks import ConfigError
from trainer.config.commands import GRPOConfig
from trainer.optim import LR_SCHEDULERS

Origin = Literal["trl", "verl"]
Kind = Literal["mapped", "refused", "ignored"]
Apply = Callable[[Any, Mapping[str, Any]], dict[str, Any]]
ORIGIN_NAMES: dict[str, str] = {"trl": "TRL", "verl": "verl"}


@dataclass(frozen=True)
class Rule:
    """What becomes of one source option.

    Attributes:
        origin: ``trl`` or ``verl``.
        source: the option's name (TRL) or dotted path (verl).
        kind: ``mapped``, ``refused`` or ``ignored``.
        ours: the option of ours it sets (``mapped``) or the nearest we have (``refused``); "" where none.
        note: for the docs, the report and the loader's fix-it: the translation, or why it is refused.
        apply: ``mapped`` only: ``(value, whole source) -> {our option: value}`` (may be empty: nothing to set).
        neutral: ``refused`` only: ``(value, whole source) -> True`` where dropping it changes nothing.
    """

    origin: Origin
    source: str
    kind: Kind
    ours: str
    note: str
    apply: Apply | None = None
    neutral: Callable[[Any, Mapping[str, Any]], bool] | None = None


def _map(origin: Origin, source: str, ours: str, note: str = "", translate: Callable[[Any], Any] | None = None) -> Rule:
    """A one-to-one rule: the value (translated) sets ``ours``; null leaves our default."""

    def apply(value: Any, _src: Mapping[str, Any]) -> dict[str, Any]:
        return {} if value is None else {ours: translate(value) if translate else value}

    return Rule(origin, source, "mapped", ours, note or ("the same" if source == ours else ours), apply)


def same_name(name: str) -> Rule:
    """A TRL option of one of our names without a rule of its own: the same value."""
    return _map("trl", name, name)


def _rule(origin: Origin, source: str, ours: str, note: str, apply: Apply) -> Rule:
    return Rule(origin, source, "mapped", ours, note, apply)


def _refuse(origin: Origin, source: str, ours: str, note: str, *neutral_values: Any) -> Rule:
    """Refused unless its value is one of ``neutral_values`` (compared with ==, so 0 matches 0.0)."""
    return Rule(origin, source, "refused", ours, note, neutral=lambda v, _s: any(v == n for n in neutral_values))


def _refuse_if(
    origin: Origin, source: str, ours: str, note: str, neutral: Callable[[Any, Mapping[str, Any]], bool]
) -> Rule:
    return Rule(origin, source, "refused", ours, note, neutral=neutral)


def _ignore(origin: Origin, source: str, note: str) -> Rule:
    return Rule(origin, source, "ignored", "", note)


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _raise(name: str, value: Any, why: str) -> dict[str, Any]:
    raise ConfigError(f"{name}={value!r}: {why}")


# ---------------------------------------------------------------------------------------------------- TRL


def _scale_rewards(value: Any) -> str:
    """TRL's ``scale_rewards``: ``group``/``batch``/``none``, or its older boolean (true: ``group``)."""
    if isinstance(value, bool):
        return "group" if value else "none"
    if value not in ("group", "batch", "none"):
        _raise("scale_rewards", value, "TRL takes group, batch, none or a boolean")
    return str(value)


def _trl_prompts(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    """TRL counts completions per step: ``generation_batch_size``, else ``per_device_train_batch_size`` x
    ``steps_per_generation`` (which defaults to ``gradient_accumulation_steps``), on one process; we count prompts
    per step over all processes."""
    per_step = src.get("steps_per_generation") or src.get("gradient_accumulation_steps") or 1
    completions = src.get("generation_batch_size") or value * per_step
    generations = int(src.get("num_generations") or 8)
    if completions % generations:
        raise ConfigError(
            f"generation_batch_size {completions} is not a multiple of num_generations {generations}: "
            "set prompt_batch_size (prompts per step) yourself"
        )
    return {"prompt_batch_size": completions // generations}


def _trl_max_steps(value: Any, _src: Mapping[str, Any]) -> dict[str, Any]:
    if value is None or value > 0:
        return {} if value is None else {"max_steps": value}
    return _raise(
        "max_steps", value, "set max_steps: training is counted in steps here (each takes prompt_batch_size prompts)"
    )


def _lr_scheduler(source: str) -> Callable[[Any], str]:
    def translate(value: Any) -> str:
        if value not in LR_SCHEDULERS:
            _raise(source, value, f"the schedules here are {list(LR_SCHEDULERS)} (after warmup_steps)")
        return str(value)

    return translate


def _save_strategy(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    if value == "no":
        return {"save_steps": 0}
    if value in ("steps", None):
        return {}
    return _raise("save_strategy", value, "checkpoints are taken every save_steps steps (TRL's 'steps')")


def _vllm_cap(source: str) -> Apply:
    def apply(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
        if value is not None:
            return {"vllm_importance_sampling_cap": float(value)}
        if src.get("use_vllm") and src.get("vllm_importance_sampling_cap") is None:
            return _raise(
                source, value, "the correction's ratio always has an upper bound here: set vllm_importance_sampling_cap"
            )
        return {}

    return apply


#: TRL 1.16 options that are ours under the same name and meaning: the value carries over unchanged.
TRL_SAME_NAMES = _names(
    """
    learning_rate num_generations beta epsilon epsilon_high delta loss_type importance_sampling_level num_iterations
    max_completion_length temperature top_p top_k gradient_accumulation_steps mask_truncated_completions
    top_entropy_quantile sapo_temperature_pos sapo_temperature_neg vespo_k_pos vespo_lambda_pos vespo_k_neg
    vespo_lambda_neg off_policy_mask_threshold use_bias_correction_kl seed weight_decay adam_beta1 adam_beta2
    adam_epsilon max_grad_norm warmup_steps output_dir save_steps save_total_limit resume_from_checkpoint
    gradient_checkpointing disable_dropout bf16 use_vllm vllm_enable_sleep_mode vllm_gpu_memory_utilization
    vllm_importance_sampling_correction vllm_importance_sampling_mode sync_ref_model ref_model_mixup_alpha
    ref_model_sync_steps max_prompt_length
    """
)  # max_prompt_length: TRL 1.16 dropped it; older configs have it

T: Origin = "trl"
_TRL: tuple[Rule, ...] = (
    *(_map(T, name, name) for name in TRL_SAME_NAMES),
    _rule(
        T,
        "per_device_train_batch_size",
        "prompt_batch_size",
        "prompt_batch_size = completions per step (generation_batch_size, else this x steps_per_generation) / "
        "num_generations (TRL counts completions per device; ours are prompts over all processes)",
        _trl_prompts,
    ),
    _rule(
        T,
        "generation_batch_size",
        "prompt_batch_size",
        "completions per step: prompt_batch_size = generation_batch_size / num_generations",
        lambda v, s: {},
    ),
    _map(
        T,
        "scale_rewards",
        "scale_rewards",
        "the same; TRL's boolean form becomes group (true) or none (false)",
        _scale_rewards,
    ),
    _rule(
        T, "max_steps", "max_steps", "the same; TRL's -1 (train by epochs) is refused: set max_steps", _trl_max_steps
    ),
    _map(
        T,
        "lr_scheduler_type",
        "lr_scheduler_type",
        f"the same, one of {', '.join(LR_SCHEDULERS)}",
        _lr_scheduler("lr_scheduler_type"),
    ),
    _map(
        T,
        "cache_implementation",
        "cache_implementation",
        "static: the same (CUDA graphs here, not in TRL); other caches: dynamic (speed or memory only)",
        lambda v: "static" if v == "static" else "dynamic",
    ),
    _map(
        T, "num_generations_eval", "eval_num_generations", "eval_num_generations (null: num_generations in TRL, 1 here)"
    ),
    _rule(
        T,
        "eval_steps",
        "eval_steps",
        "the same when eval_strategy is steps",
        lambda v, s: {"eval_steps": v} if v is not None and s.get("eval_strategy", "steps") == "steps" else {},
    ),
    _rule(T, "save_strategy", "save_steps", "'no': save_steps 0; 'steps': save_steps; others refused", _save_strategy),
    _rule(
        T,
        "vllm_importance_sampling_clip_max",
        "vllm_importance_sampling_cap",
        "vllm_importance_sampling_cap (null, no upper bound, is refused with use_vllm)",
        _vllm_cap("vllm_importance_sampling_clip_max"),
    ),
    _map(
        T,
        "vllm_importance_sampling_cap",
        "vllm_importance_sampling_cap",
        "the same (TRL's deprecated spelling of clip_max; wins)",
    ),
    _rule(
        T,
        "max_tool_calling_iterations",
        "max_tool_calling_iterations",
        "the same (null, no limit in TRL, keeps ours: 4)",
        lambda v, s: {} if v is None else {"max_tool_calling_iterations": v},
    ),
    _refuse_if(
        T,
        "steps_per_generation",
        "num_iterations",
        "one optimizer step per generated batch here (TRL's default: steps_per_generation = "
        "gradient_accumulation_steps); reuse samples with num_iterations",
        lambda v, s: v is None or v == (s.get("gradient_accumulation_steps") or 1),
    ),
    _refuse_if(T, "num_train_epochs", "max_steps", "training length is set in steps: set max_steps", lambda v, s: True),
    _refuse(T, "warmup_ratio", "warmup_steps", "use warmup_steps", None, 0.0),
    _refuse(T, "lr_scheduler_kwargs", "lr_scheduler_type", "the schedules take no arguments", None, {}),
    _refuse(
        T,
        "optim",
        "learning_rate",
        "the optimizer is torch's AdamW (adam_beta1, adam_beta2, adam_epsilon)",
        "adamw_torch",
        "adamw_torch_fused",
    ),
    _refuse(T, "label_smoothing_factor", "", "no label smoothing in a policy gradient", 0.0, None),
    _refuse(
        T,
        "reward_weights",
        "reward_components",
        "weights go in reward_components, e.g. {accuracy: 1.0, format: 0.5}",
        None,
    ),
    _refuse(
        T,
        "multi_objective_aggregation",
        "reward_components",
        "the weighted components are summed, then normalised per group (TRL's sum_then_normalize)",
        "sum_then_normalize",
    ),
    _refuse(
        T, "repetition_penalty", "temperature", "sampling is kept plain so the loss's log-probs match the sampler", 1.0
    ),
    _refuse(T, "min_p", "top_p", "min_p sampling is not supported; use top_p or top_k", None, 0.0),
    _refuse(T, "generation_kwargs", "temperature", "sampling is set by temperature, top_p and top_k only", None, {}),
    _refuse(T, "chat_template_kwargs", "apply_chat_template", "the tokenizer's template is applied as it is", None, {}),
    _refuse(
        T, "model_init_kwargs", "bf16", "the model loads with from_pretrained's defaults; bf16 sets the dtype", None, {}
    ),
    _refuse(T, "trust_remote_code", "model_name_or_path", "models load without remote code", False),
    _refuse(T, "cast_lm_head_to_fp32", "bf16", "the head runs in the model's dtype", False),
    _refuse(T, "router_aux_loss_coef", "", "no MoE router loss is added", None, 0.0),
    _refuse(
        T,
        "vllm_importance_sampling_clip_min",
        "vllm_importance_sampling_cap",
        "only an upper bound exists: vllm_importance_sampling_cap",
        None,
    ),
    _refuse_if(
        T,
        "vllm_mode",
        "vllm_mode",
        "colocate only: vllm_mode 'server' is not built (its weight-update path needs NCCL on GPUs)",
        lambda v, s: v == "colocate" or not s.get("use_vllm"),
    ),
    _refuse(T, "vllm_model_impl", "use_vllm", "vLLM's own model implementation only", "vllm"),
    _refuse(T, "vllm_structured_outputs_regex", "", "no constrained decoding", None),
    _refuse(
        T,
        "vllm_tensor_parallel_size",
        "use_vllm",
        "the colocated engine runs on the trainer's one device (no tensor parallelism)",
        1,
    ),
    _refuse(T, "fsdp", "fsdp", "TRL's FSDP option string is not read: set fsdp: true", None, "", False, []),
    _refuse(T, "fp16", "bf16", "on CUDA bf16 autocast is used (the bf16 option); fp16 is not supported", False),
    _refuse(T, "shuffle_dataset", "seed", "prompts are always drawn in a seeded random order", True),
    *(
        _ignore(T, name, "vllm_mode 'server' is not built: nothing to connect to")
        for name in _names(
            """
            vllm_server_base_url vllm_server_host vllm_server_port vllm_server_timeout vllm_group_port
            """
        )
    ),
    _ignore(T, "vllm_max_model_length", "the engine's context is max_prompt_length + max_completion_length"),
    _ignore(
        T, "per_device_eval_batch_size", "speed only: eval_chunk_prompts sets prompts per evaluation generate call"
    ),
    _ignore(T, "eval_strategy", "evaluation follows eval_steps"),
    _ignore(T, "logging_steps", "metrics are logged every step"),
    *(
        _ignore(T, name, "speed or memory only")
        for name in _names(
            """
            ds3_gather_for_generation pad_to_multiple_of use_transformers_paged
            use_transformers_continuous_batching transformers_continuous_batching_config
            gradient_checkpointing_kwargs torch_compile use_liger_kernel
            """
        )
    ),
    *(
        _ignore(T, name, "logging only: completions and metrics go to metrics.jsonl and TensorBoard")
        for name in _names(
            """
            report_to log_completions num_completions_to_print log_unique_prompts log_completions_hub_repo
            log_multimodal
            """
        )
    ),
)

# ---------------------------------------------------------------------------------------------------- verl


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
R = "actor_rollout_ref.rollout."
V: Origin = "verl"
_VERL: tuple[Rule, ...] = (
    _rule(
        V,
        "algorithm.adv_estimator",
        "advantage_estimator",
        "advantage_estimator: grpo -> outcome; rloo, reinforce_plus_plus, reinforce_plus_plus_baseline the same; "
        "gae and the rest refused (no value model)",
        _verl_estimator,
    ),
    _rule(
        V,
        "algorithm.norm_adv_by_std_in_grpo",
        "scale_rewards",
        "false: scale_rewards none (read with adv_estimator)",
        lambda v, s: {},
    ),
    _refuse(V, "algorithm.use_kl_in_reward", "beta", "the KL is a loss term here: set beta (actor.use_kl_loss)", False),
    _refuse(V, "algorithm.use_pf_ppo", "", "no prioritised-replay reweighting of the batch", False),
    _refuse(
        V,
        "algorithm.rollout_correction.rollout_is",
        "vllm_importance_sampling_mode",
        "use vllm_importance_sampling_mode and _cap",
        None,
    ),
    _refuse(
        V,
        "algorithm.rollout_correction.rollout_rs",
        "vllm_importance_sampling_mode",
        "use vllm_importance_sampling_mode (the *_mask modes reject)",
        None,
    ),
    _rule(
        V,
        "algorithm.filter_groups.enable",
        "dynamic_sampling",
        "dynamic_sampling (DAPO)",
        lambda v, s: {"dynamic_sampling": bool(v)},
    ),
    _rule(
        V,
        "algorithm.filter_groups.metric",
        "dynamic_sampling_metric",
        "with enable: acc -> accuracy; score, seq_reward, seq_final_reward -> reward",
        _with_filter(
            "dynamic_sampling_metric",
            lambda v: _FILTER_METRICS.get(v) or _raise("filter_groups.metric", v, "use acc or score"),
        ),
    ),
    _rule(
        V,
        "algorithm.filter_groups.max_num_gen_batches",
        "max_num_gen_batches",
        "with enable; verl's 0 (no limit) keeps ours: 10",
        _with_filter("max_num_gen_batches", lambda v: v or GRPOConfig.max_num_gen_batches),
    ),
    _rule(
        V,
        A + "loss_agg_mode",
        "loss_type",
        "loss_type: " + ", ".join(f"{k} -> {v}" for k, v in LOSS_AGG_MODES.items()),
        _pick(LOSS_AGG_MODES, "loss_type", "loss_agg_mode"),
    ),
    _rule(
        V,
        A + "policy_loss.loss_mode",
        "loss_type",
        "vanilla -> the clipped surrogate; gspo -> importance_sampling_level sequence_token; kl_cov and clip_cov "
        "the same (with loss_agg_mode token-mean); others refused (verl's cispo clips the weight on both sides: "
        "another weight than TRL's)",
        _verl_loss_mode,
    ),
    *(
        _map(V, A + f"policy_loss.{name}", name, name, float)
        for name in ("kl_cov_ratio", "ppo_kl_coef", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
    ),
    _refuse(V, A + "policy_loss.dro_beta", "", "no DRO objective", None),
    _rule(
        V,
        A + "clip_ratio",
        "epsilon",
        "epsilon (where clip_ratio_low is not set)",
        lambda v, s: {} if s.get(A + "clip_ratio_low") is not None else {"epsilon": v},
    ),
    _map(V, A + "clip_ratio_low", "epsilon"),
    _map(V, A + "clip_ratio_high", "epsilon_high"),
    _map(
        V,
        A + "clip_ratio_c",
        "delta",
        "delta (dual-clip PPO's bound for negative advantages; verl's default 3.0 is on)",
        float,
    ),
    _map(V, A + "tau_pos", "sapo_temperature_pos", "sapo_temperature_pos", float),
    _map(V, A + "tau_neg", "sapo_temperature_neg", "sapo_temperature_neg", float),
    _refuse(V, A + "loss_scale_factor", "max_completion_length", "dr_grpo divides by max_completion_length", None),
    _rule(V, A + "use_kl_loss", "beta", "beta = kl_loss_coef when true, else 0", _verl_beta),
    _rule(V, A + "kl_loss_coef", "beta", "used when use_kl_loss is true", lambda v, s: {}),
    _rule(V, A + "kl_loss_type", "beta", "low_var_kl and k3 are our k3 KL; others refused", lambda v, s: {}),
    _map(V, A + "ppo_epochs", "num_iterations"),
    _refuse_if(
        V,
        A + "ppo_mini_batch_size",
        "num_iterations",
        "one optimizer step per generated batch here: set it to data.train_batch_size (gradient_accumulation_steps "
        "splits the step for memory; num_iterations reuses the batch)",
        lambda v, s: v is None or v == s.get("data.train_batch_size"),
    ),
    _map(V, A + "optim.lr", "learning_rate", "learning_rate", float),
    _map(V, A + "optim.weight_decay", "weight_decay", "weight_decay", float),
    _rule(
        V,
        A + "optim.betas",
        "adam_beta1",
        "adam_beta1, adam_beta2",
        lambda v, s: {} if v is None else {"adam_beta1": float(v[0]), "adam_beta2": float(v[1])},
    ),
    _rule(
        V,
        A + "optim.lr_warmup_steps",
        "warmup_steps",
        "warmup_steps (verl's -1: none)",
        lambda v, s: {"warmup_steps": max(int(v), 0)},
    ),
    _refuse_if(
        V,
        A + "optim.lr_warmup_steps_ratio",
        "warmup_steps",
        "set warmup_steps (lr_warmup_steps)",
        lambda v, s: not v or (s.get(A + "optim.lr_warmup_steps") or -1) > 0,
    ),
    _map(
        V,
        A + "optim.lr_scheduler_type",
        "lr_scheduler_type",
        "constant and cosine the same",
        _lr_scheduler("optim.lr_scheduler_type"),
    ),
    _map(
        V,
        A + "optim.warmup_style",
        "lr_scheduler_type",
        "older spelling of optim.lr_scheduler_type",
        _lr_scheduler("optim.warmup_style"),
    ),
    _refuse(V, A + "optim.min_lr_ratio", "lr_scheduler_type", "the schedules decay to 0", None, 0.0),
    _refuse(V, A + "optim.num_cycles", "lr_scheduler_type", "cosine is half a cycle, to 0", None, 0.5),
    _refuse(V, A + "optim.optimizer", "learning_rate", "the optimizer is torch's AdamW", None, "AdamW"),
    _map(V, A + "grad_clip", "max_grad_norm", "max_grad_norm", float),
    _map(V, A + "optim.clip_grad", "max_grad_norm", "max_grad_norm (newer spelling of grad_clip)", float),
    _map(V, R + "n", "num_generations"),
    _map(V, R + "temperature", "temperature", "temperature", float),
    _map(V, R + "top_p", "top_p", "top_p", float),
    _rule(V, R + "top_k", "top_k", "top_k (verl's -1: off, our 0)", lambda v, s: {"top_k": max(int(v), 0)}),
    _refuse(V, R + "do_sample", "temperature", "training samples; evaluation is greedy at eval_temperature 0", True),
    _map(V, R + "val_kwargs.temperature", "eval_temperature", "eval_temperature", float),
    _map(V, R + "val_kwargs.n", "eval_num_generations"),
    _map(V, "actor_rollout_ref.model.path", "model_name_or_path"),
    _map(V, "actor_rollout_ref.model.enable_gradient_checkpointing", "gradient_checkpointing"),
    _rule(V, "actor_rollout_ref.model.lora_rank", "lora_r", "use_peft and lora_r (0: full fine-tuning)", _verl_lora),
    _rule(
        V,
        "actor_rollout_ref.model.lora_alpha",
        "lora_alpha",
        "lora_alpha (with lora_rank > 0)",
        _with_lora("lora_alpha"),
    ),
    _rule(
        V,
        "actor_rollout_ref.model.target_modules",
        "lora_target_modules",
        "lora_target_modules (with lora_rank > 0)",
        _with_lora("lora_target_modules", lambda v: [v] if isinstance(v, str) else list(v)),
    ),
    _map(V, "data.train_batch_size", "prompt_batch_size", "prompt_batch_size (prompts per step)"),
    _refuse_if(
        V,
        "data.gen_batch_size",
        "max_num_gen_batches",
        "dynamic sampling draws prompt_batch_size prompts a round (max_num_gen_batches rounds)",
        lambda v, s: v is None or v == s.get("data.train_batch_size"),
    ),
    _map(V, "data.max_prompt_length", "max_prompt_length"),
    _map(V, "data.max_response_length", "max_completion_length"),
    _map(
        V,
        "data.train_files",
        "train_data",
        "train_data (one file)",
        lambda v: v[0] if isinstance(v, list | tuple) else v,
    ),
    _map(
        V, "data.val_files", "eval_data", "eval_data (one file)", lambda v: v[0] if isinstance(v, list | tuple) else v
    ),
    _map(V, "data.prompt_key", "prompt_column"),
    _rule(
        V, "trainer.total_training_steps", "max_steps", "max_steps", lambda v, s: {} if v is None else {"max_steps": v}
    ),
    _refuse_if(
        V,
        "trainer.total_epochs",
        "max_steps",
        "training length is set in steps: set trainer.total_training_steps (max_steps)",
        lambda v, s: s.get("trainer.total_training_steps") is not None,
    ),
    _rule(V, "trainer.save_freq", "save_steps", "save_steps (verl's -1: never, our 0)", _steps("save_steps")),
    _rule(V, "trainer.test_freq", "eval_steps", "eval_steps (verl's -1: never, our 0)", _steps("eval_steps")),
    _map(V, "trainer.max_actor_ckpt_to_keep", "save_total_limit"),
)

# ---------------------------------------------------------------------------------------------------- entropy
_ADAPTIVE = "no adaptive entropy control (Skywork-OR1, arXiv 2505.22312); the nearest is a fixed entropy_coeff"
_ENTROPY: tuple[Rule, ...] = (
    _refuse(
        T,
        "entropy_coef",
        "entropy_coeff",
        "use entropy_coeff: ours is verl's bonus, aggregated as loss_type; TRL's is a plain token mean whatever "
        "loss_type",
        0,
        None,
    ),
    _refuse(T, "use_adaptive_entropy", "entropy_coeff", _ADAPTIVE, False, None),
    *(
        _refuse_if(
            T,
            name,
            "entropy_coeff",
            _ADAPTIVE + " (read with use_adaptive_entropy)",
            lambda v, s: not s.get("use_adaptive_entropy"),
        )
        for name in ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")
    ),
    _map(V, A + "entropy_coeff", "entropy_coeff", "the same bonus, aggregated as the loss (tested equal)", float),
)


#: The one table: every TRL and verl option with a rule. Every other TRL option (``TrainingArguments``' logging,
#: hub, hardware, data loading) and every other verl path (placement, parallelism, checkpoints) is ignored.
RULES: tuple[Rule, ...] = _TRL + _VERL + _ENTROPY
TRL_RULES = tuple(r for r in RULES if r.origin == "trl")
VERL_RULES = tuple(r for r in RULES if r.origin == "verl")
IGNORED_NOTES = {
    "trl": "every other TrainingArguments option (logging, saving, hub, hardware, data loading)",
    "verl": "every other path (placement, parallelism, the critic, logging, checkpoints)",
}

#: The source's defaults where they differ from ours, used when the source does not set the option (TRL 1.16's
#: ``GRPOConfig``, verl's ``ppo_trainer.yaml``; ``tests/integrations/test_foreign_configs.py`` reads both packages).
SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "trl": {
        "per_device_train_batch_size": 8,  # 8 completions a step: one prompt of 8 (ours: 8 prompts)
        "use_bias_correction_kl": True,
        "gradient_checkpointing": True,
        "disable_dropout": False,
        "vllm_importance_sampling_mode": "sequence_mask",
        "save_steps": 500,
    },
    "verl": {
        A + "clip_ratio_c": 3.0,  # dual clip on
        A + "optim.weight_decay": 0.01,
        A + "optim.lr_scheduler_type": "constant",
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    },
}
#: Options a source must set where its default has no counterpart here: what is kept instead.
UNSET_NOTES: dict[str, dict[str, str]] = {
    "trl": {"max_steps": f"TRL's default -1 trains by epochs: our max_steps {GRPOConfig.max_steps} is kept"},
    "verl": {
        "trainer.total_training_steps": f"verl's default trains total_epochs: our max_steps "
        f"{GRPOConfig.max_steps} is kept",
        "data.train_batch_size": "verl's default 1024 prompts (in optimizer steps of ppo_mini_batch_size 256) "
        f"has no counterpart: our prompt_batch_size {GRPOConfig.prompt_batch_size} is kept",
        R + "n": f"verl's default 1 makes no group: our num_generations {GRPOConfig.num_generations} is kept",
    },
}
