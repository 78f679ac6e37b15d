"""The commands' configs: :class:`GRPOConfig` (``train``), :class:`SFTConfig` (``sft``) and :class:`SampleConfig`
(``sample``), each composed of the option groups of :mod:`trainer.config.groups` plus its own options, and
validated when built (types first, then ranges and the rules between options)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from trainer.algorithms.advantages import ADVANTAGE_ESTIMATORS, SCALE_REWARDS, ScaleRewards
from trainer.algorithms.losses import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, PolicyOptions
from trainer.config.checks import (
    _check_non_negative,
    _check_optimizer,
    _check_positive,
    _check_reward_client,
    _check_run,
    _check_sampling,
    _check_types,
    _check_url,
    _fix,
)
from trainer.config.groups import (
    CheckpointOptions,
    DataOptions,
    LoRAOptions,
    ModelOptions,
    OptimizerOptions,
    PromptOptions,
    RewardServerOptions,
    RuntimeOptions,
    SamplingOptions,
    ScaleOptions,
    ToolOptions,
    VLLMOptions,
    _plain,
    _redacted_repr,
)
from trainer.rollout.correction import IMPORTANCE_SAMPLING_MODES, ImportanceSamplingMode


@dataclass(frozen=True, kw_only=True)
class GRPOConfig(
    ToolOptions,
    PolicyOptions,
    VLLMOptions,
    ScaleOptions,
    RuntimeOptions,
    LoRAOptions,
    CheckpointOptions,
    OptimizerOptions,
    SamplingOptions,
    RewardServerOptions,
    PromptOptions,
    DataOptions,
    ModelOptions,
):
    """Everything a GRPO run needs. Load with :func:`load_config`; build directly in tests.

    A dataclass puts its last base's fields first, so the groups are listed from the last shown (the objective's
    options, :class:`trainer.algorithms.losses.PolicyOptions`) to the first (the model); GRPO's own options follow
    theirs.
    """

    # ------------------------------------------------------------------ batch shape
    max_steps: int = 100
    """Training steps; each samples ``prompt_batch_size`` prompts and ``num_generations`` completions of each."""
    prompt_batch_size: int = 8
    """Prompts per training step (so ``prompt_batch_size * num_generations`` completions per step)."""
    num_generations: int = 8
    """Completions sampled per prompt: the group size G over which advantages are normalised."""
    rollout_chunk_prompts: int | None = None
    """Prompts per ``generate`` call; each finished chunk is scored while the next generates (None: a quarter)."""
    overlap_scoring: bool = True
    """Score each chunk while the next one generates; False waits for each chunk's rewards first (a baseline)."""

    # ------------------------------------------------------------------ generation
    max_completion_length_schedule: dict[int, int] | None = None
    """From step S on, at most L tokens: ``{S: L}`` (R1: ``{8200: 65536}``); max_completion_length before."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop groups whose rewards are all equal and sample more prompts to fill the step."""
    max_num_gen_batches: int = 10
    """With ``dynamic_sampling``, most rounds of ``prompt_batch_size`` prompts per step; then equal groups fill up."""
    dynamic_sampling_metric: str | None = None
    """What must differ in a group for dynamic sampling: ``reward`` or a component; ``None``: accuracy if present."""

    # ------------------------------------------------------------------ GRPO
    beta: float = 0.0
    """KL coefficient against the frozen reference model; 0 loads no reference model."""
    epsilon: float = 0.2
    """Lower clip range of the importance ratio: ``ratio >= 1 - epsilon``."""
    epsilon_high: float | None = None
    """Upper clip range, ``ratio <= 1 + epsilon_high`` (DAPO's clip-higher suggests 0.28); None means epsilon."""
    num_iterations: int = 1
    """Optimizer passes over each batch of rollouts (mu in DeepSeekMath); the first pass gives the old log-probs."""
    loss_type: str = "dapo"
    """``grpo``, ``bnpo``, ``dr_grpo``, ``dapo`` (aggregations); ``cispo``, ``sapo``, ``luspo``, ``vespo`` (TRL's)."""
    scale_rewards: ScaleRewards = "group"
    """Divide centred rewards by the group std (``group``), the batch std (``batch``) or not at all (``none``)."""
    advantage_estimator: str = "outcome"
    """``outcome`` (GRPO), ``process``, ``rft``, ``rloo``, ``reinforce_plus_plus(_baseline)`` (verl's names)."""
    shuffle_rewards: bool | Literal["batch", "group"] = False
    """Random-reward control (arXiv 2506.10947): permute rewards across the batch (``batch``/``true``) or per group."""
    log_grad_cosine: bool = False
    """Log ``optim/grad_cosine`` (this step's gradient against the last's); keeps one fp32 copy of the gradient."""
    step_component: str = "arithmetic"
    """With ``process``: the server's step component that scores each step (``arithmetic``: a op b = c checked)."""
    step_separator: str = "\n\n"
    """With ``process``: what separates two reasoning steps in a completion (default a blank line)."""
    mask_truncated_completions: bool = False
    """Leave completions that hit ``max_completion_length`` without EOS out of the loss (DAPO's overlong filter)."""
    disable_dropout: bool = True
    """Turn dropout off so the policy, old-policy and reference log-probs of one sequence agree."""
    ref_model_name_or_path: str | None = None
    """Reference model for the KL term; ``None`` uses ``model_name_or_path`` (the policy's start)."""
    sync_ref_model: bool = False
    """Move the reference towards the policy every ``ref_model_sync_steps`` (TRL; DeepSeekMath's iterative RL)."""
    ref_model_mixup_alpha: float = 0.6
    """At a sync the reference becomes ``alpha * policy + (1 - alpha) * reference`` (1.0 resets it to the policy)."""
    ref_model_sync_steps: int = 512
    """Optimizer steps between two syncs of the reference (TRL's meaning: ``num_iterations`` per training step)."""

    # ------------------------------------------------------------------ PPO-ptx: a supervised term on fixed rows
    pretrain_data: str | None = None
    """SFT rows (``sft``'s format) whose completion NLL joins every update (InstructGPT's PPO-ptx; OpenRLHF's name)."""
    ptx_coef: float = 0.05
    """Weight of the ``pretrain_data`` term: ``ptx_coef`` x token-mean NLL (OpenRLHF's name and default)."""
    ptx_batch_size: int = 16
    """``pretrain_data`` rows per optimizer update, over all processes (a seeded order, one permutation an epoch)."""

    # ------------------------------------------------------------------ evaluation, logging, checkpoints
    eval_num_generations: int = 1
    """Completions per held-out prompt; pass@1 is the mean share of correct ones."""
    eval_temperature: float = 0.0
    """Sampling temperature for evaluation; 0 decodes greedily."""
    eval_max_prompts: int | None = None
    """Evaluate on at most this many held-out prompts (the first ones); ``None`` uses all."""
    eval_chunk_prompts: int = 64
    """Held-out prompts per ``generate`` call."""

    # ------------------------------------------------------------------ hardware
    logprobs_chunk_tokens: int | None = 1024
    """Completion tokens whose logits exist at once (recomputed in backward), so memory stays flat in V x C x B."""
    shared_prefix_forward: bool = True
    """Run each group's prompt once, its KV cache shared by the group (exact; one process; arXiv 2506.05433)."""

    # ------------------------------------------------------------------ vLLM rollouts
    vllm_mode: Literal["colocate", "server"] = "colocate"
    """``colocate``: the engine shares the trainer's process and device, weights synced in memory each step."""
    vllm_enable_sleep_mode: bool = False
    """Release the engine's KV cache and weights while the policy updates (CUDA only; woken at each sync)."""
    vllm_importance_sampling_correction: bool = True
    """Weigh each token's surrogate by pi_old / pi_vllm (truncated importance sampling), as TRL does."""
    vllm_importance_sampling_mode: ImportanceSamplingMode = "token_truncate"
    """``token_truncate``, ``token_mask``, ``sequence_truncate`` or ``sequence_mask`` (TRL's modes)."""
    vllm_importance_sampling_cap: float = 3.0
    """Upper bound C of the correction's ratio: truncated to C, or masked to 0 above it (``*_mask`` modes)."""
    vllm_weight_sync_tolerance: float | None = 1e-3
    """Most a probe prompt's per-token log-prob may differ, engine vs policy, after a sync (fp32); null: no check."""

    def __post_init__(self) -> None:
        _check_types(self)
        _validate(self)

    @property
    def completions_per_step(self) -> int:
        """``prompt_batch_size * num_generations``."""
        return self.prompt_batch_size * self.num_generations

    def completion_length_at(self, step: int) -> int:
        """The ``max_completion_length`` of step ``step`` (0-based), with the schedule applied."""
        started = [s for s in (self.max_completion_length_schedule or {}) if s <= step]
        return self.max_completion_length_schedule[max(started)] if started else self.max_completion_length  # type: ignore[index]

    @property
    def max_completion_length_ever(self) -> int:
        """The longest completion any step may generate (what the model's context must hold)."""
        return max([self.max_completion_length, *(self.max_completion_length_schedule or {}).values()])

    @property
    def chunk_prompts(self) -> int:
        """Prompts per ``generate`` call, with the default resolved."""
        if self.rollout_chunk_prompts is not None:
            return self.rollout_chunk_prompts
        return max(1, math.ceil(self.prompt_batch_size / 4))

    def to_dict(self) -> dict[str, Any]:
        """Plain values (tuples as lists), ready for YAML or JSON; secrets (``reward_api_key``) left out as ``None``,
        so a checkpoint's saved config never holds the key (a resumed run reads it from its own config or env)."""
        return _plain(self)

    def __repr__(self) -> str:
        return _redacted_repr(self)


@dataclass(frozen=True, kw_only=True)
class SFTConfig(
    ScaleOptions, RuntimeOptions, CheckpointOptions, OptimizerOptions, PromptOptions, DataOptions, ModelOptions
):
    """``python -m trainer sft``: supervised fine-tuning with the loss on completion tokens only (the cold start)."""

    # ------------------------------------------------------------------ model and data
    completion_column: str = "completion"
    """Column of the completion: a string, or a list with one assistant message."""
    messages_column: str = "messages"
    """Column of chat messages, used when a row has no prompt: the last (assistant) message is the completion."""
    max_completion_length: int | None = 1024
    """Completion tokens kept, EOS included (the start is kept); ``None`` keeps all."""

    # ------------------------------------------------------------------ length and batch
    num_train_epochs: float = 1.0
    """Passes over ``train_data`` (fractions allowed); ``max_steps`` overrides it when set."""
    max_steps: int | None = None
    """Optimizer steps; ``None`` takes ``num_train_epochs`` passes over the rows."""
    batch_size: int = 32
    """Rows per optimizer step (all micro-batches together)."""

    # ------------------------------------------------------------------ optimisation
    learning_rate: float = 2e-5
    """Peak AdamW learning rate (TRL's SFT default; only the default differs from ``train``'s)."""

    # ------------------------------------------------------------------ evaluation, logging, checkpoints
    eval_batch_size: int = 64
    """Held-out rows per forward pass."""
    output_dir: str = "runs/sft"
    """Directory for metrics (``metrics.jsonl``, TensorBoard) and checkpoints (only the default differs)."""

    def __post_init__(self) -> None:
        _check_types(self)
        _check_positive(self, "batch_size", "gradient_accumulation_steps", "eval_batch_size")
        if self.batch_size % self.gradient_accumulation_steps:
            raise _fix(
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
                f"must divide batch_size ({self.batch_size}) so micro-batches are equal",
                f"Choose one of {[d for d in range(1, self.batch_size + 1) if self.batch_size % d == 0]}.",
            )
        for name in ("max_prompt_length", "max_completion_length", "max_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise _fix(name, getattr(self, name), "must be >= 1 or null", "Use null for no limit.")
        if self.num_train_epochs <= 0:
            raise _fix("num_train_epochs", self.num_train_epochs, "must be > 0", "Use 1 for one pass over the rows.")
        _check_optimizer(self)
        _check_non_negative(self, "eval_steps", "save_steps")
        _check_run(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain values, ready for YAML or JSON."""
        return _plain(self)


@dataclass(frozen=True, kw_only=True)
class SampleConfig(VLLMOptions, RuntimeOptions, SamplingOptions, RewardServerOptions, PromptOptions, ModelOptions):
    """``python -m trainer sample``: rejection sampling (DeepSeek-R1's phase 3) into an SFT dataset."""

    # ------------------------------------------------------------------ model and data
    data: str
    """Prompt rows in ``train``'s format (prompt, ground_truth, task ...): .jsonl, .json, .parquet, .csv, a dataset."""
    split: str = "train"
    """Split to read when ``data`` is a ``datasets`` dataset with several splits."""
    max_prompts: int | None = None
    """Sample only the first this many rows; ``None`` uses all."""
    output_dir: str = "runs/sample"
    """Where ``kept.jsonl`` (the SFT dataset), ``summary.json`` and, if asked, ``samples.jsonl`` are written."""

    # ------------------------------------------------------------------ generation
    num_generations: int = 16
    """Completions sampled per prompt (``n`` of pass@k; DeepSeek-R1 samples several and keeps the correct ones)."""
    chunk_prompts: int = 8
    """Prompts per ``generate`` call; each finished chunk is scored while the next one generates."""

    # ------------------------------------------------------------------ vLLM rollouts
    vllm_gpu_memory_utilization: float = 0.9
    """Share of GPU memory the engine may take (CUDA; nothing else shares the device here, unlike in ``train``)."""

    # ------------------------------------------------------------------ what is kept
    reward_threshold: float = 1.0
    """Keep a completion whose score is at least this (a null score is never kept)."""
    threshold_component: str | None = None
    """Compare this component's score with ``reward_threshold`` (e.g. ``accuracy``); ``None`` uses the reward."""
    keep_truncated: bool = False
    """Also keep completions that hit ``max_completion_length`` without EOS (an SFT target should end)."""
    max_kept_per_prompt: int | None = None
    """Keep at most this many completions of one prompt (the first ones sampled); ``None`` keeps all."""
    deduplicate: bool = True
    """Keep one copy of completions of the same prompt that are equal up to whitespace."""
    pass_at_k: tuple[int, ...] | None = None
    """The k of the pass@k figures (each <= num_generations); ``None`` reports k = 1 and k = num_generations."""
    save_samples: bool = False
    """Also write every completion with its reward to ``samples.jsonl`` (to audit what was dropped)."""

    def __post_init__(self) -> None:
        _check_types(self)
        _check_positive(self, "num_generations", "chunk_prompts", "max_completion_length")
        if self.max_prompts is not None and self.max_prompts < 1:
            raise _fix("max_prompts", self.max_prompts, "must be >= 1 or null", "Use null to sample every row.")
        if self.max_kept_per_prompt is not None and self.max_kept_per_prompt < 1:
            raise _fix("max_kept_per_prompt", self.max_kept_per_prompt, "must be >= 1 or null", "Use null for no cap.")
        _check_sampling(self, training=False)
        _check_reward_client(self)
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise _fix("vllm_gpu_memory_utilization", self.vllm_gpu_memory_utilization, "must be in (0, 1]", "Use 0.9.")
        for k in self.ks:
            if not 1 <= k <= self.num_generations:
                raise _fix(
                    "pass_at_k",
                    list(self.pass_at_k or ()),
                    f"every k must be between 1 and num_generations ({self.num_generations})",
                    "pass@k needs at least k samples of each prompt; raise num_generations or lower k.",
                )
        _check_run(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain values (tuples as lists), ready for YAML or JSON; ``reward_api_key`` left out as ``None``."""
        return _plain(self)

    def __repr__(self) -> str:
        return _redacted_repr(self)

    @property
    def ks(self) -> tuple[int, ...]:
        """The k of the pass@k figures, with the default resolved."""
        return self.pass_at_k if self.pass_at_k is not None else tuple(sorted({1, self.num_generations}))


def _validate(c: GRPOConfig) -> None:
    """Cross-field and range checks; each error names the field, the rule and a value that works."""
    _check_positive(
        c,
        "max_steps",
        "prompt_batch_size",
        "gradient_accumulation_steps",
        "max_completion_length",
        "num_iterations",
        "eval_num_generations",
        "eval_chunk_prompts",
    )
    if c.num_generations < 2:
        raise _fix(
            "num_generations",
            c.num_generations,
            "must be >= 2, since GRPO's advantage compares completions of the same prompt",
            "Use 4 to 16 (TRL's default is 8).",
        )
    if c.completions_per_step % c.gradient_accumulation_steps:
        n = c.completions_per_step
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        raise _fix(
            "gradient_accumulation_steps",
            c.gradient_accumulation_steps,
            f"must divide prompt_batch_size * num_generations = {n} so micro-batches are equal",
            f"Choose one of {divisors}.",
        )
    if c.rollout_chunk_prompts is not None and not 1 <= c.rollout_chunk_prompts <= c.prompt_batch_size:
        raise _fix(
            "rollout_chunk_prompts",
            c.rollout_chunk_prompts,
            f"must be between 1 and prompt_batch_size ({c.prompt_batch_size})",
            "Use null for the default, or a smaller number for more overlap of generation and scoring.",
        )
    _check_sampling(c, training=True)
    if c.eval_temperature < 0:
        raise _fix("eval_temperature", c.eval_temperature, "must be >= 0", "Use 0 for greedy decoding.")
    _check_optimizer(c)
    if c.beta < 0:
        raise _fix("beta", c.beta, "must be >= 0", "Set beta: 0 to turn it off.")
    _check_reward_client(c)
    _check_non_negative(c, "eval_steps", "save_steps")
    if not 0 <= c.epsilon < 1:
        raise _fix("epsilon", c.epsilon, "must be in [0, 1)", "DeepSeekMath and TRL use 0.2.")
    if c.epsilon_high is not None and c.epsilon_high < c.epsilon:
        # Clip-higher exists to widen the upper side (DAPO section 3.1); a value below epsilon narrows it instead,
        # which is almost always a slip such as 0.028 for 0.28.
        raise _fix(
            "epsilon_high",
            c.epsilon_high,
            f"must be >= epsilon ({c.epsilon}): it is the upper clip range, ratio <= 1 + epsilon_high",
            "DAPO's clip-higher uses 0.28 with epsilon 0.2; null means epsilon.",
        )
    if c.loss_type not in LOSS_TYPES:
        raise _fix("loss_type", c.loss_type, f"must be one of {LOSS_TYPES.choices()}", "TRL's default is 'dapo'.")
    _check_objective(c)
    if c.scale_rewards not in SCALE_REWARDS:
        hint = "Dr. GRPO recommends 'none'."
        if isinstance(c.scale_rewards, bool):
            hint = f"TRL's boolean form: write {'group' if c.scale_rewards else 'none'!r} for {c.scale_rewards}."
        raise _fix("scale_rewards", c.scale_rewards, f"must be one of {SCALE_REWARDS}", hint)
    _check_run(c)
    _check_recipe(c)
    if c.eval_max_prompts is not None and c.eval_max_prompts < 1:
        raise _fix("eval_max_prompts", c.eval_max_prompts, "must be >= 1 or null", "Use null to evaluate on all.")
    _check_vllm(c)
    _check_lora(c)
    _check_tools(c)
    if c.logprobs_chunk_tokens is not None and c.logprobs_chunk_tokens < 1:
        raise _fix(
            "logprobs_chunk_tokens", c.logprobs_chunk_tokens, "must be >= 1 or null", "1024 suits a 152k vocabulary."
        )


def _check_objective(c: GRPOConfig) -> None:
    """The options of issue 22's objectives (TRL's names and ranges)."""
    level = c.importance_sampling_level
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        hint = "Use 'token' (PPO/GRPO) or 'sequence' (GSPO)."
        raise _fix("importance_sampling_level", level, f"must be one of {IMPORTANCE_SAMPLING_LEVELS}", hint)
    if c.loss_type == "cispo" and c.epsilon_high is None:
        raise _fix(
            "epsilon_high",
            None,
            "must be set with loss_type 'cispo': it caps the importance weight itself (TRL would cap it at epsilon)",
            "ScaleRL recommends 5.0.",
        )
    if c.delta is not None and c.delta <= 1:
        raise _fix("delta", c.delta, "must be > 1: it bounds the ratio from above", "INTELLECT-2 uses 4.")
    for name in ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg"):
        if getattr(c, name) <= 0:
            raise _fix(name, getattr(c, name), "must be > 0", "Keep TRL's default.")
    _check_non_negative(c, "vespo_k_pos", "vespo_k_neg")
    for name in ("kl_cov_ratio", "clip_cov_ratio"):
        if not 0.0 < getattr(c, name) <= 1.0:
            raise _fix(name, getattr(c, name), "must be in (0, 1]: a share of tokens", "verl's default is 0.0002.")
    _check_non_negative(c, "ppo_kl_coef")
    if c.clip_cov_lb >= c.clip_cov_ub:
        raise _fix("clip_cov_lb", c.clip_cov_lb, f"must be below clip_cov_ub ({c.clip_cov_ub})", "verl: 1.0 and 5.0.")
    if not math.isfinite(c.entropy_coeff):
        raise _fix("entropy_coeff", c.entropy_coeff, "must be finite", "verl's recipes use 0 (off) to 0.01.")
    if not 0.0 <= c.top_entropy_quantile <= 1.0:
        raise _fix(
            "top_entropy_quantile",
            c.top_entropy_quantile,
            "must be in [0, 1]: the share of tokens, by entropy, the policy term trains on",
            "1.0 trains on every token; arXiv 2506.01939 uses 0.2.",
        )
    if c.off_policy_mask_threshold is not None and c.off_policy_mask_threshold < 0:
        raise _fix(
            "off_policy_mask_threshold", c.off_policy_mask_threshold, "must be >= 0 or null", "TRL suggests 0.5."
        )
    if (
        c.loss_type == "vespo"
        and c.use_vllm
        and c.vllm_importance_sampling_correction
        and c.vllm_importance_sampling_mode.startswith("sequence")
    ):
        raise _fix(
            "vllm_importance_sampling_mode",
            c.vllm_importance_sampling_mode,
            "must be a token mode with loss_type 'vespo', which folds per-token weights into its sequence weight",
            "Use 'token_truncate' or 'token_mask' (as TRL requires).",
        )


def _check_lora(c: GRPOConfig) -> None:
    """The LoRA fields (``use_peft`` and ``lora_*``)."""
    if c.lora_r < 1 or c.lora_alpha < 1:
        bad = "lora_r" if c.lora_r < 1 else "lora_alpha"
        raise _fix(bad, getattr(c, bad), "must be >= 1", "TRL's defaults are lora_r 16 and lora_alpha 32.")
    if not 0 <= c.lora_dropout < 1:
        raise _fix("lora_dropout", c.lora_dropout, "must be in [0, 1)", "TRL's default is 0.05.")
    if c.lora_target_modules is not None and not c.lora_target_modules:
        raise _fix(
            "lora_target_modules", list(c.lora_target_modules), "must name a module", "Use null for peft's default."
        )
    if c.use_peft and c.ref_model_name_or_path is not None:
        raise _fix(
            "ref_model_name_or_path",
            c.ref_model_name_or_path,
            "cannot be set with use_peft: the reference is the base model with the adapter disabled",
            "Remove ref_model_name_or_path, or set use_peft: false.",
        )
    if c.use_peft and c.sync_ref_model:
        raise _fix(
            "sync_ref_model",
            True,
            "cannot be set with use_peft: the reference is the base model with the adapter disabled, which a sync "
            "would not move",
            "Set sync_ref_model: false, or use_peft: false to train and sync the whole model.",
        )


def _check_recipe(c: GRPOConfig) -> None:
    """The R1/DeepSeekMath/DAPO options: process supervision, reference sync, dynamic sampling, length schedule."""
    if c.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        raise _fix(
            "advantage_estimator",
            c.advantage_estimator,
            f"must be one of {ADVANTAGE_ESTIMATORS.choices()}",
            "Use 'outcome'.",
        )
    if c.shuffle_rewards and c.advantage_estimator == "process":
        raise _fix(
            "shuffle_rewards",
            True,
            "shuffles one reward per completion, and process supervision trains on step rewards",
            "Use advantage_estimator: outcome (or rft) for the random-reward control.",
        )
    metric = c.dynamic_sampling_metric
    if (
        metric is not None
        and metric != "reward"
        and c.reward_components is not None
        and metric not in c.reward_components
    ):
        raise _fix(
            "dynamic_sampling_metric",
            metric,
            f"is neither 'reward' nor one of the requested components {sorted(c.reward_components)}",
            "Use 'reward' (the total), a component of reward_components, or null (accuracy where present).",
        )
    if c.pretrain_data is not None:
        if c.ptx_coef <= 0:
            raise _fix(
                "ptx_coef",
                c.ptx_coef,
                "must be > 0 with pretrain_data (the rows would be read and never trained on)",
                "OpenRLHF's default is 0.05; drop pretrain_data to turn the term off.",
            )
        _check_positive(c, "ptx_batch_size")
    if not c.step_separator:
        raise _fix("step_separator", c.step_separator, "must not be empty", 'Use "\\n\\n" (a blank line).')
    if c.sync_ref_model and c.beta == 0:
        raise _fix(
            "sync_ref_model",
            True,
            "needs beta > 0: with beta 0 there is no reference model to sync",
            "Set beta (e.g. 0.04) or sync_ref_model: false.",
        )
    if not 0 < c.ref_model_mixup_alpha <= 1:
        raise _fix(
            "ref_model_mixup_alpha", c.ref_model_mixup_alpha, "must be in (0, 1]", "TRL's default is 0.6; 1.0 resets."
        )
    _check_positive(c, "ref_model_sync_steps", "max_num_gen_batches")
    schedule = c.max_completion_length_schedule
    if schedule is not None:
        for step, length in schedule.items():
            if not (isinstance(step, int) and isinstance(length, int)) or isinstance(step, bool) or step < 0:
                raise _fix(
                    "max_completion_length_schedule",
                    schedule,
                    "maps a step (>= 0) to a length in tokens (>= 1)",
                    "e.g. {8200: 65536}: from step 8200 on, 65536 tokens.",
                )
            if isinstance(length, bool) or length < 1:
                raise _fix("max_completion_length_schedule", schedule, "lengths must be >= 1", "e.g. {8200: 65536}.")


def _check_vllm(c: GRPOConfig) -> None:
    """The vLLM options; checked whether or not ``use_vllm`` is on, so a typo fails before it is turned on."""
    if c.vllm_mode not in ("colocate", "server"):
        raise _fix("vllm_mode", c.vllm_mode, "must be 'colocate' or 'server'", "Use 'colocate'.")
    if c.use_vllm and c.vllm_mode == "server":
        raise _fix(
            "vllm_mode",
            c.vllm_mode,
            "is not built: vLLM's supported way to push weights into a separate server is its NCCL weight-transfer "
            "engine, GPUs only",
            "Use 'colocate' (the engine runs in the trainer's process and gets the weights in memory).",
        )
    if not 0 < c.vllm_gpu_memory_utilization <= 1:
        raise _fix(
            "vllm_gpu_memory_utilization", c.vllm_gpu_memory_utilization, "must be in (0, 1]", "TRL's default is 0.3."
        )
    if c.vllm_importance_sampling_mode not in IMPORTANCE_SAMPLING_MODES:
        raise _fix(
            "vllm_importance_sampling_mode",
            c.vllm_importance_sampling_mode,
            f"must be one of {IMPORTANCE_SAMPLING_MODES}",
            "Use 'token_truncate' (truncated importance sampling).",
        )
    if c.vllm_importance_sampling_cap <= 0:
        raise _fix("vllm_importance_sampling_cap", c.vllm_importance_sampling_cap, "must be > 0", "TRL uses 3.0.")
    if c.vllm_weight_sync_tolerance is not None and c.vllm_weight_sync_tolerance <= 0:
        raise _fix(
            "vllm_weight_sync_tolerance", c.vllm_weight_sync_tolerance, "must be > 0 or null", "Keep the default."
        )


def _check_tools(c: GRPOConfig) -> None:
    """The tool options (``tools``, ``tool_*``, ``max_tool_calling_iterations``); checked whether or not tools are
    on, so a typo fails before they are turned on."""
    from trainer.tools.formats import TOOL_CALL_FORMATS, TOOLS

    unknown = sorted(set(c.tools or ()) - set(TOOLS))
    if unknown:
        rule = f"names unknown tools {unknown}; the tools are {list(TOOLS)}"
        raise _fix("tools", list(c.tools or ()), rule, "Use [python].")
    if c.tool_call_format not in TOOL_CALL_FORMATS:
        raise _fix(
            "tool_call_format",
            c.tool_call_format,
            f"must be one of {TOOL_CALL_FORMATS}",
            "Use 'code_block' (```python blocks) or 'qwen_json' (Qwen's <tool_call> JSON).",
        )
    _check_positive(c, "max_tool_calling_iterations", "tool_output_max_chars")
    if c.tool_timeout_s is not None and not c.tool_timeout_s > 0:
        raise _fix("tool_timeout_s", c.tool_timeout_s, "must be > 0 or null", "Use 10, or null for the server's.")
    if not c.tool_retry_deadline_s >= 0:
        raise _fix("tool_retry_deadline_s", c.tool_retry_deadline_s, "must be >= 0", "Keep the default (300).")
    if c.tool_server_urls is not None:
        if not c.tool_server_urls:
            raise _fix("tool_server_urls", [], "needs at least one URL", "Use null for the reward servers.")
        for url in c.tool_server_urls:
            _check_url(url, "tool_server_urls")
    if c.tools and c.advantage_estimator == "process":
        raise _fix(
            "advantage_estimator",
            c.advantage_estimator,
            "cannot be 'process' with tools: the scored text leaves the tool's output out, so its steps do not map "
            "onto the completion's tokens",
            "Use 'outcome'.",
        )
