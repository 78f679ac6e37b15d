"""TRL 1.16's ``GRPOConfig`` options, each with its rule (:mod:`trainer.config.foreign`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.config.checks import ConfigError
from trainer.config.foreign.rule import (
    Apply,
    Origin,
    Rule,
    fail,
    ignored,
    lr_scheduler,
    mapped,
    names,
    refused,
    refused_if,
    rule,
)
from trainer.optim import LR_SCHEDULERS


def _scale_rewards(value: Any) -> str:
    """TRL's ``scale_rewards``: ``group``/``batch``/``none``, or its older boolean (true: ``group``)."""
    if isinstance(value, bool):
        return "group" if value else "none"
    if value not in ("group", "batch", "none"):
        fail("scale_rewards", value, "TRL takes group, batch, none or a boolean")
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
    return fail(
        "max_steps", value, "set max_steps: training is counted in steps here (each takes prompt_batch_size prompts)"
    )


def _save_strategy(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    if value == "no":
        return {"save_steps": 0}
    if value in ("steps", None):
        return {}
    return fail("save_strategy", value, "checkpoints are taken every save_steps steps (TRL's 'steps')")


def _vllm_cap(source: str) -> Apply:
    def apply(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
        if value is not None:
            return {"vllm_importance_sampling_cap": float(value)}
        if src.get("use_vllm") and src.get("vllm_importance_sampling_cap") is None:
            return fail(
                source, value, "the correction's ratio always has an upper bound here: set vllm_importance_sampling_cap"
            )
        return {}

    return apply


#: TRL 1.16 options that are ours under the same name and meaning: the value carries over unchanged.
TRL_SAME_NAMES = names(
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
_TABLE: tuple[Rule, ...] = (
    *(mapped(T, name, name) for name in TRL_SAME_NAMES),
    rule(
        T,
        "per_device_train_batch_size",
        "prompt_batch_size",
        "prompt_batch_size = completions per step (generation_batch_size, else this x steps_per_generation) / "
        "num_generations (TRL counts completions per device; ours are prompts over all processes)",
        _trl_prompts,
    ),
    rule(
        T,
        "generation_batch_size",
        "prompt_batch_size",
        "completions per step: prompt_batch_size = generation_batch_size / num_generations",
        lambda v, s: {},
    ),
    mapped(
        T,
        "scale_rewards",
        "scale_rewards",
        "the same; TRL's boolean form becomes group (true) or none (false)",
        _scale_rewards,
    ),
    rule(T, "max_steps", "max_steps", "the same; TRL's -1 (train by epochs) is refused: set max_steps", _trl_max_steps),
    mapped(
        T,
        "lr_scheduler_type",
        "lr_scheduler_type",
        f"the same, one of {', '.join(LR_SCHEDULERS)}",
        lr_scheduler("lr_scheduler_type"),
    ),
    mapped(
        T,
        "cache_implementation",
        "cache_implementation",
        "static: the same (CUDA graphs here, not in TRL); other caches: dynamic (speed or memory only)",
        lambda v: "static" if v == "static" else "dynamic",
    ),
    mapped(
        T, "num_generations_eval", "eval_num_generations", "eval_num_generations (null: num_generations in TRL, 1 here)"
    ),
    rule(
        T,
        "eval_steps",
        "eval_steps",
        "the same when eval_strategy is steps",
        lambda v, s: {"eval_steps": v} if v is not None and s.get("eval_strategy", "steps") == "steps" else {},
    ),
    rule(T, "save_strategy", "save_steps", "'no': save_steps 0; 'steps': save_steps; others refused", _save_strategy),
    rule(
        T,
        "vllm_importance_sampling_clip_max",
        "vllm_importance_sampling_cap",
        "vllm_importance_sampling_cap (null, no upper bound, is refused with use_vllm)",
        _vllm_cap("vllm_importance_sampling_clip_max"),
    ),
    mapped(
        T,
        "vllm_importance_sampling_cap",
        "vllm_importance_sampling_cap",
        "the same (TRL's deprecated spelling of clip_max; wins)",
    ),
    rule(
        T,
        "max_tool_calling_iterations",
        "max_tool_calling_iterations",
        "the same (null, no limit in TRL, keeps ours: 4)",
        lambda v, s: {} if v is None else {"max_tool_calling_iterations": v},
    ),
    refused_if(
        T,
        "steps_per_generation",
        "num_iterations",
        "one optimizer step per generated batch here (TRL's default: steps_per_generation = "
        "gradient_accumulation_steps); reuse samples with num_iterations",
        lambda v, s: v is None or v == (s.get("gradient_accumulation_steps") or 1),
    ),
    refused_if(T, "num_train_epochs", "max_steps", "training length is set in steps: set max_steps", lambda v, s: True),
    refused(T, "warmup_ratio", "warmup_steps", "use warmup_steps", None, 0.0),
    refused(T, "lr_scheduler_kwargs", "lr_scheduler_type", "the schedules take no arguments", None, {}),
    refused(
        T,
        "optim",
        "learning_rate",
        "the optimizer is torch's AdamW (adam_beta1, adam_beta2, adam_epsilon)",
        "adamw_torch",
        "adamw_torch_fused",
    ),
    refused(T, "label_smoothing_factor", "", "no label smoothing in a policy gradient", 0.0, None),
    refused(
        T,
        "reward_weights",
        "reward_components",
        "weights go in reward_components, e.g. {accuracy: 1.0, format: 0.5}",
        None,
    ),
    refused(
        T,
        "multi_objective_aggregation",
        "reward_components",
        "the weighted components are summed, then normalised per group (TRL's sum_then_normalize)",
        "sum_then_normalize",
    ),
    refused(
        T, "repetition_penalty", "temperature", "sampling is kept plain so the loss's log-probs match the sampler", 1.0
    ),
    refused(T, "min_p", "top_p", "min_p sampling is not supported; use top_p or top_k", None, 0.0),
    refused(T, "generation_kwargs", "temperature", "sampling is set by temperature, top_p and top_k only", None, {}),
    refused(T, "chat_template_kwargs", "apply_chat_template", "the tokenizer's template is applied as it is", None, {}),
    refused(
        T, "model_init_kwargs", "bf16", "the model loads with from_pretrained's defaults; bf16 sets the dtype", None, {}
    ),
    refused(T, "trust_remote_code", "model_name_or_path", "models load without remote code", False),
    refused(T, "cast_lm_head_to_fp32", "bf16", "the head runs in the model's dtype", False),
    refused(T, "router_aux_loss_coef", "", "no MoE router loss is added", None, 0.0),
    refused(
        T,
        "vllm_importance_sampling_clip_min",
        "vllm_importance_sampling_cap",
        "only an upper bound exists: vllm_importance_sampling_cap",
        None,
    ),
    refused_if(
        T,
        "vllm_mode",
        "vllm_mode",
        "colocate only: vllm_mode 'server' is not built (its weight-update path needs NCCL on GPUs)",
        lambda v, s: v == "colocate" or not s.get("use_vllm"),
    ),
    refused(T, "vllm_model_impl", "use_vllm", "vLLM's own model implementation only", "vllm"),
    refused(T, "vllm_structured_outputs_regex", "", "no constrained decoding", None),
    refused(
        T,
        "vllm_tensor_parallel_size",
        "use_vllm",
        "the colocated engine runs on the trainer's one device (no tensor parallelism)",
        1,
    ),
    refused(T, "fsdp", "fsdp", "TRL's FSDP option string is not read: set fsdp: true", None, "", False, []),
    refused(T, "fp16", "bf16", "on CUDA bf16 autocast is used (the bf16 option); fp16 is not supported", False),
    refused(T, "shuffle_dataset", "seed", "prompts are always drawn in a seeded random order", True),
    *(
        ignored(T, name, "vllm_mode 'server' is not built: nothing to connect to")
        for name in names(
            """
            vllm_server_base_url vllm_server_host vllm_server_port vllm_server_timeout vllm_group_port
            """
        )
    ),
    ignored(T, "vllm_max_model_length", "the engine's context is max_prompt_length + max_completion_length"),
    ignored(
        T, "per_device_eval_batch_size", "speed only: eval_chunk_prompts sets prompts per evaluation generate call"
    ),
    ignored(T, "eval_strategy", "evaluation follows eval_steps"),
    ignored(T, "logging_steps", "metrics are logged every step"),
    *(
        ignored(T, name, "speed or memory only")
        for name in names(
            """
            ds3_gather_for_generation pad_to_multiple_of use_transformers_paged
            use_transformers_continuous_batching transformers_continuous_batching_config
            gradient_checkpointing_kwargs torch_compile use_liger_kernel
            """
        )
    ),
    *(
        ignored(T, name, "logging only: completions and metrics go to metrics.jsonl and TensorBoard")
        for name in names(
            """
            report_to log_completions num_completions_to_print log_unique_prompts log_completions_hub_repo
            log_multimodal
            """
        )
    ),
)

_ADAPTIVE = "no adaptive entropy control (Skywork-OR1, arXiv 2505.22312); the nearest is a fixed entropy_coeff"
_ENTROPY: tuple[Rule, ...] = (  # TRL's entropy options; verl's bonus is ours
    refused(
        T,
        "entropy_coef",
        "entropy_coeff",
        "use entropy_coeff: ours is verl's bonus, aggregated as loss_type; TRL's is a plain token mean whatever "
        "loss_type",
        0,
        None,
    ),
    refused(T, "use_adaptive_entropy", "entropy_coeff", _ADAPTIVE, False, None),
    *(
        refused_if(
            T,
            name,
            "entropy_coeff",
            _ADAPTIVE + " (read with use_adaptive_entropy)",
            lambda v, s: not s.get("use_adaptive_entropy"),
        )
        for name in ("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")
    ),
)

#: Every TRL option with a rule, in the docs' order.
TRL: tuple[Rule, ...] = _TABLE + _ENTROPY
