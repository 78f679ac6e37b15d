"""The trainer's one config: a frozen dataclass, loaded from YAML and validated before anything starts.

Knob names follow TRL's ``GRPOConfig`` where they mean the same thing (``num_generations``, ``beta``,
``epsilon``, ``loss_type`` ...), so a TRL recipe carries over. Each field has a one-line docstring under it
(``python -m trainer fields`` prints them). Validation errors say which value is wrong and how to fix it.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import math
import types
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from trainer.grpo import (
    IMPORTANCE_SAMPLING_MODES,
    LOSS_TYPES,
    SCALE_REWARDS,
    ImportanceSamplingMode,
    LossType,
    ScaleRewards,
)

LR_SCHEDULERS = ("constant", "linear", "cosine")

#: Names other trainers use for our knobs, so a ported config gets a useful "did you mean".
_ALIASES = {
    "lr": "learning_rate",
    "kl_coef": "beta",
    "init_kl_coef": "beta",
    "clip_ratio": "epsilon",
    "cliprange": "epsilon",
    "group_size": "num_generations",
    "num_return_sequences": "num_generations",
    "batch_size": "prompt_batch_size",
    "max_new_tokens": "max_completion_length",
    "max_length": "max_completion_length",
    "ppo_epochs": "num_iterations",
    "model": "model_name_or_path",
    "dataset": "train_data",
    "epsilon_low": "epsilon",
    "clip_range": "epsilon",
    "kl_beta": "beta",
    "max_new_tokens_eval": "max_completion_length",
    "num_generations_eval": "eval_num_generations",
    "per_device_eval_batch_size": "eval_chunk_prompts",
    "eval_dataset": "eval_data",
    "train_dataset": "train_data",
    "lr_scheduler": "lr_scheduler_type",
    "warmup": "warmup_steps",
    "grad_clip": "max_grad_norm",
    "clip_grad_norm": "max_grad_norm",
    "vllm_importance_sampling_clip_max": "vllm_importance_sampling_cap",
    "vllm_gpu_memory_utilisation": "vllm_gpu_memory_utilization",
    "lora_rank": "lora_r",
    "peft": "use_peft",
    "target_modules": "lora_target_modules",
}

_NO_SERVER_MODE = "vllm_mode 'server' is not built (vLLM's weight-update path to a server needs NCCL on GPUs)"

#: TRL (and ``transformers.TrainingArguments``) options with no counterpart here, and what to do instead. Without
#: this a close spelling could be suggested for an option that means something else (``num_train_epochs`` is not
#: ``num_iterations``).
_UNSUPPORTED = {
    "num_train_epochs": "training length is set in steps: set max_steps (each step takes prompt_batch_size prompts)",
    "max_prompt_length_eval": "max_prompt_length applies to evaluation too",
    "vllm_importance_sampling_clip_min": "only an upper bound exists: vllm_importance_sampling_cap",
    "vllm_server_host": _NO_SERVER_MODE,
    "vllm_server_port": _NO_SERVER_MODE,
    "vllm_server_base_url": _NO_SERVER_MODE,
    "vllm_tensor_parallel_size": "the colocated engine runs on the trainer's one device (no tensor parallelism)",
    "vllm_max_model_length": "the engine's context is max_prompt_length + max_completion_length",
    "steps_per_generation": "every step generates its own batch; reuse it with num_iterations",
    "generation_batch_size": "set prompt_batch_size (prompts per step) and rollout_chunk_prompts (per generate call)",
    "reward_funcs": "rewards come from the reward server: set reward_components or reward_preset",
    "reward_weights": "give weights per component in reward_components, e.g. {accuracy: 1.0, format: 0.5}",
    "delta": "two-sided clipping (INTELLECT-2) is not implemented; epsilon and epsilon_high bound the ratio",
    "importance_sampling_level": "only token-level ratios (TRL's default 'token') are implemented",
    "sync_ref_model": "the reference model stays frozen at model_name_or_path (or ref_model_name_or_path)",
    "fp16": "on CUDA bf16 autocast is used (the bf16 option); fp16 is not supported",
    "logging_steps": "metrics are logged every step",
    "save_strategy": "checkpoints follow save_steps",
    "eval_strategy": "evaluation follows eval_steps",
    "per_device_train_batch_size": "set prompt_batch_size: prompts per step over all processes (TRL counts "
    "completions per device); each process takes an equal share",
    "repetition_penalty": "sampling is kept plain so the loss's log-probs match the sampler",
    "min_p": "min_p sampling is not supported; use top_p or top_k",
}


class ConfigError(ValueError):
    """A config value is missing, unknown or out of range; the message says how to fix it."""


@dataclass(frozen=True)
class GRPOConfig:
    """Everything a GRPO run needs. Load with :func:`load_config`; build directly in tests."""

    # ------------------------------------------------------------------ model and data
    model_name_or_path: str
    """Policy to train: a Hugging Face model directory (or hub id) loadable with ``AutoModelForCausalLM``."""
    train_data: str
    """Training prompts: a .jsonl, .json, .parquet or .csv file, a ``save_to_disk`` directory, or a hub dataset."""
    tokenizer_name_or_path: str | None = None
    """Tokenizer to use; ``None`` takes the one stored with ``model_name_or_path``."""
    train_split: str = "train"
    """Split to read when ``train_data`` is a ``datasets`` dataset with several splits."""
    eval_data: str | None = None
    """Held-out prompts for pass@1 (same formats as ``train_data``); ``None`` disables evaluation."""
    eval_split: str = "test"
    """Split to read when ``eval_data`` is a ``datasets`` dataset with several splits."""
    prompt_column: str = "prompt"
    """Column holding the prompt: a string, or a list of chat messages ``{"role", "content"}``."""
    apply_chat_template: bool = True
    """Render prompts with the tokenizer's chat template when it has one (a string becomes one user message)."""

    # ------------------------------------------------------------------ reward server
    reward_server_urls: tuple[str, ...] = ("http://127.0.0.1:8000",)
    """Reward server base URLs; requests are balanced over them and fail over between them."""
    reward_components: dict[str, Any] | None = None
    """Request-level components, e.g. ``{accuracy: 1.0, format: 0.5}``; a row's ``components`` column overrides."""
    reward_preset: str | None = None
    """Request-level preset (``r1_zero``, ``r1``); ``None`` lets components (or the server default) decide."""
    reward_timeout_s: float = 120.0
    """Timeout of one ``POST /v1/rewards`` request, in seconds."""
    reward_max_retries: int = 5
    """Retries of a failed reward request (connection errors, 429, 503) before the run stops."""
    reward_wait_ready_s: float = 120.0
    """How long to wait at start for every reward server's ``/readyz``, in seconds."""
    reward_api_key: str | None = None
    """Reward server API key (sent as a Bearer token); ``None`` reads ``RLVR_API_KEY``. Never logged or saved."""

    # ------------------------------------------------------------------ batch shape
    max_steps: int = 100
    """Training steps; each samples ``prompt_batch_size`` prompts and ``num_generations`` completions of each."""
    prompt_batch_size: int = 8
    """Prompts per training step (so ``prompt_batch_size * num_generations`` completions per step)."""
    num_generations: int = 8
    """Completions sampled per prompt: the group size G over which advantages are normalised."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; the step's completions are split evenly between them."""
    rollout_chunk_prompts: int | None = None
    """Prompts per ``generate`` call; each finished chunk is scored while the next generates (None: a quarter)."""
    overlap_scoring: bool = True
    """Score each chunk while the next one generates; False waits for each chunk's rewards first (a baseline)."""

    # ------------------------------------------------------------------ generation
    max_prompt_length: int | None = 512
    """Prompt tokens kept (the end is kept, the start cut); ``None`` keeps all."""
    max_completion_length: int = 512
    """Most tokens generated per completion; a completion that reaches it without EOS is truncated."""
    temperature: float = 1.0
    """Sampling temperature; log-probs for the loss use the same temperature so ratios match the sampler."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set with this much probability (1.0 keeps all)."""
    top_k: int = 0
    """Keep only the k most likely tokens when sampling (0 keeps all)."""

    # ------------------------------------------------------------------ optimisation
    learning_rate: float = 1e-6
    """Peak AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    adam_epsilon: float = 1e-8
    """AdamW epsilon."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this before each optimizer step (0 disables clipping)."""
    warmup_steps: int = 0
    """Optimizer steps of linear learning-rate warm-up from 0."""
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after warm-up: ``constant``, ``linear`` decay to 0, or ``cosine`` decay to 0."""

    # ------------------------------------------------------------------ GRPO
    beta: float = 0.0
    """KL coefficient against the frozen reference model; 0 loads no reference model."""
    epsilon: float = 0.2
    """Lower clip range of the importance ratio: ``ratio >= 1 - epsilon``."""
    epsilon_high: float | None = None
    """Upper clip range, ``ratio <= 1 + epsilon_high`` (DAPO's clip-higher suggests 0.28); None means epsilon."""
    num_iterations: int = 1
    """Optimizer passes over each batch of rollouts (mu in DeepSeekMath); above 1 the old-policy log-probs are kept."""
    loss_type: LossType = "dapo"
    """Token-loss aggregation: ``grpo`` (per-sequence mean), ``bnpo``, ``dr_grpo`` or ``dapo`` (batch token mean)."""
    scale_rewards: ScaleRewards = "group"
    """Divide centred rewards by the group std (``group``), the batch std (``batch``) or not at all (``none``)."""
    mask_truncated_completions: bool = False
    """Leave completions that hit ``max_completion_length`` without EOS out of the loss (DAPO's overlong filter)."""
    disable_dropout: bool = True
    """Turn dropout off so the policy, old-policy and reference log-probs of one sequence agree."""
    ref_model_name_or_path: str | None = None
    """Reference model for the KL term; ``None`` uses ``model_name_or_path`` (the policy's start)."""

    # ------------------------------------------------------------------ LoRA (peft)
    use_peft: bool = False
    """Train LoRA adapters (peft) instead of every weight; with ``beta > 0`` the reference is the adapter-less base."""
    lora_r: int = 16
    """LoRA rank: the inner dimension of each adapter's two matrices."""
    lora_alpha: int = 32
    """LoRA scaling numerator: an adapter's update is multiplied by ``lora_alpha / lora_r``."""
    lora_dropout: float = 0.05
    """Dropout on the adapters' input (turned off, like all dropout, while ``disable_dropout`` is true)."""
    lora_target_modules: tuple[str, ...] | None = None
    """Modules to adapt, e.g. ``[q_proj, v_proj]`` or ``all-linear``; ``None`` takes peft's default for the model."""

    # ------------------------------------------------------------------ evaluation, logging, checkpoints
    seed: int = 42
    """Seed of Python, NumPy and torch; with it a run (and its resume) repeats exactly on one machine."""
    output_dir: str = "runs/grpo"
    """Directory for metrics (``metrics.jsonl``, TensorBoard), checkpoints and curves."""
    eval_steps: int = 0
    """Evaluate pass@1 every this many steps (0: only at start and end when ``eval_data`` is set)."""
    eval_num_generations: int = 1
    """Completions per held-out prompt; pass@1 is the mean share of correct ones."""
    eval_temperature: float = 0.0
    """Sampling temperature for evaluation; 0 decodes greedily."""
    eval_max_prompts: int | None = None
    """Evaluate on at most this many held-out prompts (the first ones); ``None`` uses all."""
    eval_chunk_prompts: int = 64
    """Held-out prompts per ``generate`` call."""
    save_steps: int = 0
    """Save a checkpoint every this many steps (0: only at the end)."""
    save_total_limit: int | None = None
    """Keep only the newest this many checkpoints; ``None`` keeps all."""
    resume_from_checkpoint: str | None = None
    """A checkpoint directory to continue from, or ``latest`` for the newest one in ``output_dir``."""
    report_to_tensorboard: bool = True
    """Also write metrics as TensorBoard events under ``output_dir/tensorboard``."""
    progress_bar: bool = True
    """Show a tqdm progress bar with the latest reward."""

    # ------------------------------------------------------------------ hardware
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train: ``auto`` picks CUDA when present."""
    bf16: bool | None = None
    """bf16 autocast on CUDA (``None``: on when the GPU supports it); never used on CPU."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save GPU memory (CUDA only)."""
    fsdp: bool = False
    """With several processes, shard the policy over them with FSDP2 (``fully_shard``) instead of DDP replicas."""
    logprobs_chunk_tokens: int | None = 1024
    """Completion tokens whose logits exist at once (recomputed in backward), so memory stays flat in V x C x B."""
    torch_num_threads: int | None = None
    """CPU threads for torch (``None`` keeps torch's default)."""

    # ------------------------------------------------------------------ vLLM rollouts
    use_vllm: bool = False
    """Sample rollouts with a vLLM engine in this process instead of transformers' ``generate`` (the vllm extra)."""
    vllm_mode: Literal["colocate", "server"] = "colocate"
    """``colocate``: the engine shares the trainer's process and device, weights synced in memory each step."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of GPU memory the colocated engine may take (CUDA; on CPU the KV cache is sized for the batch)."""
    vllm_enable_sleep_mode: bool = False
    """Release the engine's KV cache and weights while the policy updates (CUDA only; woken at each sync)."""
    vllm_enforce_eager: bool | None = None
    """Run the engine without torch.compile and CUDA graphs; ``None``: eager on CPU, compiled on CUDA."""
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

    @property
    def chunk_prompts(self) -> int:
        """Prompts per ``generate`` call, with the default resolved."""
        if self.rollout_chunk_prompts is not None:
            return self.rollout_chunk_prompts
        return max(1, math.ceil(self.prompt_batch_size / 4))

    def to_dict(self) -> dict[str, Any]:
        """Plain values (tuples as lists), ready for YAML or JSON; secrets (``reward_api_key``) left out as ``None``,
        so a checkpoint's saved config never holds the key (a resumed run reads it from its own config or env)."""
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        values.update(dict.fromkeys(_SECRETS))
        return values

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={'<redacted>' if f.name in _SECRETS and getattr(self, f.name) else repr(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
        )
        return f"{type(self).__name__}({shown})"


#: Fields that are never written out or logged in clear.
_SECRETS = ("reward_api_key",)


def names_a_local_path(name: str) -> bool:
    """Whether a ``*_name_or_path`` / ``*_data`` value can only be a local path, never a hub id (``org/name``):
    it exists, starts with ``.``, ``/`` or ``~``, or has more than one ``/``."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


def _fix(name: str, value: Any, rule: str, hint: str) -> ConfigError:
    return ConfigError(f"{name}={value!r}: {rule}. {hint}")


def _validate(c: GRPOConfig) -> None:
    """Cross-field and range checks; each error names the field, the rule and a value that works."""
    positive_ints = (
        "max_steps",
        "prompt_batch_size",
        "gradient_accumulation_steps",
        "max_completion_length",
        "num_iterations",
        "eval_num_generations",
        "eval_chunk_prompts",
    )
    for name in positive_ints:
        if getattr(c, name) < 1:
            raise _fix(name, getattr(c, name), "must be >= 1", f"Set {name}: 1 or more.")
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
    if c.max_prompt_length is not None and c.max_prompt_length < 1:
        raise _fix("max_prompt_length", c.max_prompt_length, "must be >= 1 or null", "Use null to keep whole prompts.")
    if c.temperature <= 0:
        raise _fix(
            "temperature", c.temperature, "must be > 0 for training (GRPO needs sampled, diverse groups)", "Use 1.0."
        )
    if c.eval_temperature < 0:
        raise _fix("eval_temperature", c.eval_temperature, "must be >= 0", "Use 0 for greedy decoding.")
    if not 0 < c.top_p <= 1:
        raise _fix("top_p", c.top_p, "must be in (0, 1]", "Use 1.0 to keep every token.")
    if c.top_k < 0:
        raise _fix("top_k", c.top_k, "must be >= 0", "Use 0 to keep every token.")
    if not 0 < c.learning_rate < 1:
        raise _fix("learning_rate", c.learning_rate, "must be in (0, 1)", "Typical GRPO values are 1e-6 to 1e-5.")
    for name in ("weight_decay", "max_grad_norm", "beta", "reward_wait_ready_s"):
        if getattr(c, name) < 0:
            raise _fix(name, getattr(c, name), "must be >= 0", f"Set {name}: 0 to turn it off.")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(c, name) < 1:
            raise _fix(name, getattr(c, name), "must be in [0, 1)", "The usual values are 0.9 and 0.999.")
    if c.adam_epsilon <= 0 or c.reward_timeout_s <= 0:
        bad = "adam_epsilon" if c.adam_epsilon <= 0 else "reward_timeout_s"
        raise _fix(bad, getattr(c, bad), "must be > 0", "Keep the default.")
    if c.warmup_steps < 0 or c.reward_max_retries < 0 or c.eval_steps < 0 or c.save_steps < 0:
        bad = next(n for n in ("warmup_steps", "reward_max_retries", "eval_steps", "save_steps") if getattr(c, n) < 0)
        raise _fix(bad, getattr(c, bad), "must be >= 0", "Use 0 to turn it off.")
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
        raise _fix("loss_type", c.loss_type, f"must be one of {LOSS_TYPES}", "TRL's default is 'dapo'.")
    if c.scale_rewards not in SCALE_REWARDS:
        hint = "Dr. GRPO recommends 'none'."
        if isinstance(c.scale_rewards, bool):
            hint = f"TRL's boolean form: write {'group' if c.scale_rewards else 'none'!r} for {c.scale_rewards}."
        raise _fix("scale_rewards", c.scale_rewards, f"must be one of {SCALE_REWARDS}", hint)
    if not 0 <= c.seed < 2**32:
        raise _fix("seed", c.seed, "must be in [0, 2**32)", "NumPy seeds only take that range; use e.g. 42.")
    _check_components(c.reward_components)
    if c.lr_scheduler_type not in LR_SCHEDULERS:
        raise _fix("lr_scheduler_type", c.lr_scheduler_type, f"must be one of {LR_SCHEDULERS}", "Use 'constant'.")
    if c.device not in ("auto", "cpu", "cuda"):
        raise _fix("device", c.device, "must be auto, cpu or cuda", "Use auto.")
    if not c.reward_server_urls:
        raise _fix(
            "reward_server_urls",
            c.reward_server_urls,
            "needs at least one URL",
            "Start a server: python -m reward_server.",
        )
    for url in c.reward_server_urls:
        _check_url(url)
    if c.save_total_limit is not None and c.save_total_limit < 1:
        raise _fix("save_total_limit", c.save_total_limit, "must be >= 1 or null", "Use null to keep every checkpoint.")
    if c.eval_max_prompts is not None and c.eval_max_prompts < 1:
        raise _fix("eval_max_prompts", c.eval_max_prompts, "must be >= 1 or null", "Use null to evaluate on all.")
    _check_vllm(c)
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
    if c.logprobs_chunk_tokens is not None and c.logprobs_chunk_tokens < 1:
        raise _fix(
            "logprobs_chunk_tokens", c.logprobs_chunk_tokens, "must be >= 1 or null", "1024 suits a 152k vocabulary."
        )
    if c.torch_num_threads is not None and c.torch_num_threads < 1:
        raise _fix("torch_num_threads", c.torch_num_threads, "must be >= 1 or null", "Use null for torch's default.")


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


def _check_url(url: str) -> None:
    """A base URL the client can append ``/v1/rewards`` to."""
    example = "Write each as a base URL, e.g. http://127.0.0.1:8000 (a YAML list for several)."
    if not url.startswith(("http://", "https://")):
        raise _fix("reward_server_urls", url, "must be an http(s) URL", example)
    parts = urlsplit(url)
    if not parts.hostname or any(ch.isspace() or ch == "," for ch in url):
        raise _fix("reward_server_urls", url, "is not one URL with a host", example)
    try:
        parts.port  # noqa: B018  # raises on a port that is not a number in range
    except ValueError as exc:
        raise _fix("reward_server_urls", url, f"has a bad port ({exc})", example) from exc
    if parts.path.rstrip("/").endswith(("/v1/rewards", "/v1")):
        raise _fix("reward_server_urls", url, "must be the server's base URL: the client adds /v1/rewards", example)


def _check_components(components: dict[str, Any] | None) -> None:
    """``reward_components`` maps a component name to a weight or to ``{weight: w, ...params}``, as the server takes
    it; checked here so a typo fails at load, not after the first batch was generated."""
    if components is None:
        return
    for name, spec in components.items():
        weight = spec.get("weight", 1.0) if isinstance(spec, dict) else spec
        if not isinstance(name, str) or not (
            isinstance(weight, int | float) and not isinstance(weight, bool) and math.isfinite(weight)
        ):
            raise _fix(
                "reward_components",
                {name: spec},
                "maps a component name to a number or to {weight: number, ...params}",
                "e.g. {accuracy: 1.0, format: {weight: 0.5, think_prefilled: true}}.",
            )


# ---------------------------------------------------------------------------------------------------- type checks


@cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(GRPOConfig)


def _describe(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if typing.get_origin(tp) is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _matches(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, tuple) and all(_matches(v, typing.get_args(tp)[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, tp)


def _check_types(c: GRPOConfig) -> None:
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        tp = _hints()[f.name]
        if typing.get_origin(tp) is Literal:
            continue  # _validate names the allowed values with a hint
        if not _matches(value, tp):
            if isinstance(value, tuple):  # a list whose items have the wrong type: name the item
                bad = next(v for v in value if not _matches(v, typing.get_args(tp)[0]))
                raise ConfigError(f"{f.name}: {bad!r} has type {type(bad).__name__}; expected {_describe(tp)}.")
            raise ConfigError(f"{f.name}={value!r} has type {type(value).__name__}; expected {_describe(tp)}.")
        # NaN passes every `< 0` check and inf every upper bound, so they are refused before the range checks.
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{f.name}={value!r}: must be a finite number. Give a number such as the default.")
        # An empty string is falsy: `resume_from_checkpoint: ""` would silently start afresh, `eval_data: ""`
        # would silently skip evaluation.
        if isinstance(value, str) and not value.strip():
            hint = "use null to leave it unset" if _matches(None, tp) else "give a value"
            raise ConfigError(f"{f.name}={value!r}: must not be empty; {hint}.")


def _coerce(name: str, value: Any) -> Any:
    """YAML-level conveniences: ``1e-5`` (PyYAML reads it as a string) to float, lists to tuples."""
    tp = _hints()[name]
    accepts_float = tp is float or (typing.get_origin(tp) in (types.UnionType,) and float in typing.get_args(tp))
    if accepts_float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if accepts_float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    is_tuple = typing.get_origin(tp) is tuple or any(typing.get_origin(a) is tuple for a in typing.get_args(tp))
    if isinstance(value, list) and is_tuple:
        return tuple(value)
    if name in ("reward_server_urls", "lora_target_modules") and isinstance(value, str):
        return (value,)
    return value


# ---------------------------------------------------------------------------------------------------- loading


def config_from_dict(values: dict[str, Any], *, source: str = "config") -> GRPOConfig:
    """Build and validate a :class:`GRPOConfig` from plain values.

    Raises:
        ConfigError: an unknown key (with the closest known name), a missing required key, a wrong type or an
            invalid value.
    """
    for key in values:
        _check_key(key, source)
    required = [f.name for f in dataclasses.fields(GRPOConfig) if f.default is dataclasses.MISSING]
    missing = [k for k in required if k not in values]
    if missing:
        raise ConfigError(f"{source} lacks required option(s) {missing}: {', '.join(field_docs()[k] for k in missing)}")
    return GRPOConfig(**{k: _coerce(k, v) for k, v in values.items()})


def _check_key(key: Any, source: str) -> None:
    """Refuse an option name that is not a field, with the closest known name (or what to use instead)."""
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    if not isinstance(key, str):
        raise ConfigError(f"option names are strings; got {key!r} in {source}")
    if key not in known:
        if key in _UNSUPPORTED:
            raise ConfigError(f"option {key!r} in {source} is not supported: {_UNSUPPORTED[key]}.")
        close = [_ALIASES[key]] if key in _ALIASES else difflib.get_close_matches(key, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else " Run `python -m trainer fields` for the list."
        raise ConfigError(f"unknown option {key!r} in {source}.{hint}")


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> GRPOConfig:
    """Read a YAML config, apply ``overrides`` (e.g. from ``--set key=value``), validate.

    Relative paths in the file stay relative to the current directory, as on the command line.

    Raises:
        ConfigError: the file is a directory, not UTF-8, not valid YAML (or repeats a key), not a mapping, or what
            :func:`config_from_dict` raises.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    for key, value in (overrides or {}).items():  # a name given on the command line is its mistake, not the file's
        _check_key(key, f"--set {key}={value}")
    if path.is_dir():
        raise ConfigError(f"{path} is a directory; give the YAML config file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    values = _parse_yaml(text, str(path)) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path} must hold a YAML mapping of option: value, got {type(values).__name__}")
    values.update(overrides or {})
    return config_from_dict(values, source=str(path))


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice is an error (PyYAML keeps the last one silently)."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"option {key!r} is given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def _parse_yaml(text: str, source: str) -> Any:
    """YAML to Python values; a syntax error or a repeated key is a :class:`ConfigError` naming the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {' '.join(str(exc).split())}") from exc


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["max_steps=10", "beta=0.04"]`` to ``{"max_steps": 10, "beta": 0.04}`` (values parsed as YAML).

    Raises:
        ConfigError: a pair without ``=``, or a value that is not valid YAML.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = _parse_yaml(raw, f"--set {pair}")
    return out


@cache
def field_docs() -> dict[str, str]:
    """Each field's one-line docstring, read from this module's source (the string under the field)."""
    tree = ast.parse(inspect.getsource(GRPOConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


__all__ = [
    "ConfigError",
    "GRPOConfig",
    "config_from_dict",
    "field_docs",
    "load_config",
    "names_a_local_path",
    "parse_overrides",
]
