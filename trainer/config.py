"""The trainer's configs: frozen dataclasses, loaded from YAML and validated before anything starts.

:class:`GRPOConfig` is ``python -m trainer train``'s, :class:`SFTConfig` ``sft``'s and :class:`SampleConfig`
``sample``'s; they share the loader, the ``--set`` overrides, the type checks and the names of the options they
have in common. Knob names follow TRL's ``GRPOConfig`` and ``SFTConfig`` where they mean the same thing
(``num_generations``, ``beta``, ``epsilon``, ``loss_type``, ``completion_only_loss`` ...), so a TRL recipe
carries over. Each field has a one-line docstring under it (``python -m trainer fields [train|sft|sample]``
prints them). Validation errors say which value is wrong and how to fix it.
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
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from trainer.algorithms.advantages import ADVANTAGE_ESTIMATORS, SCALE_REWARDS, ScaleRewards
from trainer.algorithms.losses import LOSS_TYPES, LossType
from trainer.optim import LR_SCHEDULERS
from trainer.rollout.correction import IMPORTANCE_SAMPLING_MODES, ImportanceSamplingMode

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
    reward_retry_deadline_s: float = 300.0
    """Seconds a failed reward request is retried (connection errors, 429, 503) before the run stops."""
    reward_max_retries: int | None = None
    """At most this many retries of a reward request as well; ``None``: only ``reward_retry_deadline_s`` counts."""
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
    max_completion_length_schedule: dict[int, int] | None = None
    """From step S on, at most L tokens: ``{S: L}`` (R1: ``{8200: 65536}``); max_completion_length before."""
    temperature: float = 1.0
    """Sampling temperature; log-probs for the loss use the same temperature so ratios match the sampler."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set with this much probability; the loss renormalises the same way."""
    top_k: int = 0
    """Keep only the k most likely tokens when sampling (0 keeps all); the loss renormalises over the same set."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop groups whose rewards are all equal and sample more prompts to fill the step."""
    max_num_gen_batches: int = 10
    """With ``dynamic_sampling``, most rounds of ``prompt_batch_size`` prompts per step; then equal groups fill up."""
    dynamic_sampling_metric: str | None = None
    """What must differ in a group for dynamic sampling: ``reward`` or a component; ``None``: accuracy if present."""

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
    """Optimizer steps of linear learning-rate warm-up (the first runs at lr / (warmup_steps + 1), not 0)."""
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "linear"
    """Learning-rate schedule after warm-up: ``linear`` decay to 0 (TRL's default), ``cosine`` or ``constant``."""

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
    advantage_estimator: Literal["outcome", "process", "rft"] = "outcome"
    """``outcome`` (GRPO's group baseline), ``process`` (step rewards, DeepSeekMath 4.1.3) or ``rft`` (online RFT)."""
    shuffle_rewards: bool = False
    """Random-reward control (arXiv 2506.10947): permute each step's rewards across the batch before advantages."""
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


#: Fields that are never written out or logged in clear.
_SECRETS = ("reward_api_key",)


def names_a_local_path(name: str) -> bool:
    """Whether a ``*_name_or_path`` / ``*_data`` value can only be a local path, never a hub id (``org/name``):
    it exists, starts with ``.``, ``/`` or ``~``, or has more than one ``/``."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


@dataclass(frozen=True)
class SFTConfig:
    """``python -m trainer sft``: supervised fine-tuning with the loss on completion tokens only (the cold start)."""

    # ------------------------------------------------------------------ model and data
    model_name_or_path: str
    """Model to fine-tune: a Hugging Face model directory (or hub id) loadable with ``AutoModelForCausalLM``."""
    train_data: str
    """Rows of ``prompt`` and ``completion``, or of chat ``messages`` (.jsonl, .json, .parquet, .csv, a dataset)."""
    tokenizer_name_or_path: str | None = None
    """Tokenizer to use; ``None`` takes the one stored with ``model_name_or_path``."""
    train_split: str = "train"
    """Split to read when ``train_data`` is a ``datasets`` dataset with several splits."""
    eval_data: str | None = None
    """Held-out rows (same formats) for ``eval/loss``; ``None`` disables evaluation."""
    eval_split: str = "test"
    """Split to read when ``eval_data`` is a ``datasets`` dataset with several splits."""
    prompt_column: str = "prompt"
    """Column of the prompt: a string, or chat messages; rendered exactly as ``train`` renders GRPO prompts."""
    completion_column: str = "completion"
    """Column of the completion: a string, or a list with one assistant message."""
    messages_column: str = "messages"
    """Column of chat messages, used when a row has no prompt: the last (assistant) message is the completion."""
    apply_chat_template: bool = True
    """Render prompts with the tokenizer's chat template when it has one (a string becomes one user message)."""
    max_prompt_length: int | None = 512
    """Prompt tokens kept (the end is kept, the start cut, as in ``train``); ``None`` keeps all."""
    max_completion_length: int | None = 1024
    """Completion tokens kept, EOS included (the start is kept); ``None`` keeps all."""

    # ------------------------------------------------------------------ length and batch
    num_train_epochs: float = 1.0
    """Passes over ``train_data`` (fractions allowed); ``max_steps`` overrides it when set."""
    max_steps: int | None = None
    """Optimizer steps; ``None`` takes ``num_train_epochs`` passes over the rows."""
    batch_size: int = 32
    """Rows per optimizer step (all micro-batches together)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; ``batch_size`` rows are split evenly between them."""

    # ------------------------------------------------------------------ optimisation
    learning_rate: float = 2e-5
    """Peak AdamW learning rate (TRL's SFT default)."""
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
    """Optimizer steps of linear learning-rate warm-up (the first runs at lr / (warmup_steps + 1), not 0)."""
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "linear"
    """Learning-rate schedule after warm-up: ``linear`` decay to 0 (TRL's default), ``cosine`` or ``constant``."""

    # ------------------------------------------------------------------ evaluation, logging, checkpoints
    seed: int = 42
    """Seed of Python, NumPy and torch, and of the row order (a fresh permutation per epoch)."""
    output_dir: str = "runs/sft"
    """Directory for metrics (``metrics.jsonl``, TensorBoard) and checkpoints."""
    eval_steps: int = 0
    """Held-out loss every this many steps (0: at the start and the end only, when ``eval_data`` is set)."""
    eval_batch_size: int = 64
    """Held-out rows per forward pass."""
    save_steps: int = 0
    """Save a checkpoint every this many steps (0: only at the end)."""
    save_total_limit: int | None = None
    """Keep only the newest this many checkpoints; ``None`` keeps all."""
    resume_from_checkpoint: str | None = None
    """A checkpoint directory to continue from, or ``latest`` for the newest one in ``output_dir``."""
    report_to_tensorboard: bool = True
    """Also write metrics as TensorBoard events under ``output_dir/tensorboard``."""
    progress_bar: bool = True
    """Show a tqdm progress bar with the latest loss."""

    # ------------------------------------------------------------------ hardware
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train: ``auto`` picks CUDA when present."""
    bf16: bool | None = None
    """bf16 autocast on CUDA (``None``: on when the GPU supports it); never used on CPU."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save GPU memory (CUDA only)."""
    fsdp: bool = False
    """With several processes (``torchrun``), shard the model over them with FSDP2 instead of DDP replicas."""
    torch_num_threads: int | None = None
    """CPU threads for torch (``None`` keeps torch's default)."""

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


@dataclass(frozen=True)
class SampleConfig:
    """``python -m trainer sample``: rejection sampling (DeepSeek-R1's phase 3) into an SFT dataset."""

    # ------------------------------------------------------------------ model and data
    model_name_or_path: str
    """Policy to sample from: a checkpoint directory (``from_pretrained`` format) or a hub id."""
    data: str
    """Prompt rows in ``train``'s format (prompt, ground_truth, task ...): .jsonl, .json, .parquet, .csv, a dataset."""
    tokenizer_name_or_path: str | None = None
    """Tokenizer to use; ``None`` takes the one stored with ``model_name_or_path``."""
    split: str = "train"
    """Split to read when ``data`` is a ``datasets`` dataset with several splits."""
    prompt_column: str = "prompt"
    """Column holding the prompt: a string, or a list of chat messages ``{"role", "content"}``."""
    apply_chat_template: bool = True
    """Render prompts with the tokenizer's chat template when it has one (a string becomes one user message)."""
    max_prompts: int | None = None
    """Sample only the first this many rows; ``None`` uses all."""
    output_dir: str = "runs/sample"
    """Where ``kept.jsonl`` (the SFT dataset), ``summary.json`` and, if asked, ``samples.jsonl`` are written."""

    # ------------------------------------------------------------------ reward server
    reward_server_urls: tuple[str, ...] = ("http://127.0.0.1:8000",)
    """Reward server base URLs; requests are balanced over them and fail over between them."""
    reward_components: dict[str, Any] | None = None
    """Request-level components, e.g. ``{accuracy: 1.0, format: 0.5}``; a row's ``components`` column overrides."""
    reward_preset: str | None = None
    """Request-level preset (``r1_zero``, ``r1``); ``None`` lets components (or the server default) decide."""
    reward_timeout_s: float = 120.0
    """Timeout of one ``POST /v1/rewards`` request, in seconds."""
    reward_retry_deadline_s: float = 300.0
    """Seconds a failed reward request is retried (connection errors, 429, 503) before the command stops."""
    reward_max_retries: int | None = None
    """At most this many retries of a reward request as well; ``None``: only ``reward_retry_deadline_s`` counts."""
    reward_wait_ready_s: float = 120.0
    """How long to wait at start for every reward server's ``/readyz``, in seconds."""
    reward_api_key: str | None = None
    """Reward server API key (sent as a Bearer token); ``None`` reads ``RLVR_API_KEY``. Never logged or saved."""

    # ------------------------------------------------------------------ sampling
    num_generations: int = 16
    """Completions sampled per prompt (``n`` of pass@k; DeepSeek-R1 samples several and keeps the correct ones)."""
    chunk_prompts: int = 8
    """Prompts per ``generate`` call; each finished chunk is scored while the next one generates."""
    max_prompt_length: int | None = 512
    """Prompt tokens kept (the end is kept, the start cut); ``None`` keeps all."""
    max_completion_length: int = 512
    """Most tokens generated per completion; a completion that reaches it without EOS is truncated."""
    temperature: float = 1.0
    """Sampling temperature; 0 decodes greedily (then every completion of a prompt is the same)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set with this much probability (1.0 keeps all)."""
    top_k: int = 0
    """Keep only the k most likely tokens when sampling (0 keeps all)."""

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

    # ------------------------------------------------------------------ generation backend
    use_vllm: bool = False
    """Sample with a vLLM engine that loads ``model_name_or_path`` itself (the vllm extra) instead of ``generate``."""
    vllm_gpu_memory_utilization: float = 0.9
    """Share of GPU memory the engine may take (CUDA; nothing else shares the device here, unlike in ``train``)."""
    vllm_enforce_eager: bool | None = None
    """Run the engine without torch.compile and CUDA graphs; ``None``: eager on CPU, compiled on CUDA."""

    # ------------------------------------------------------------------ run
    seed: int = 42
    """Seed of Python, NumPy and torch: the same seed samples the same completions on one machine."""
    progress_bar: bool = True
    """Show a tqdm progress bar over prompts with the running pass@1 and kept fraction."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to generate: ``auto`` picks CUDA when present."""
    bf16: bool | None = None
    """bf16 autocast on CUDA (``None``: on when the GPU supports it); never used on CPU."""
    torch_num_threads: int | None = None
    """CPU threads for torch (``None`` keeps torch's default)."""

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


C = typing.TypeVar("C", GRPOConfig, SFTConfig, SampleConfig)

#: Per config class: other trainers' names for its knobs (for "did you mean") and options it refuses with a hint.
_TABLES: dict[type, tuple[dict[str, str], dict[str, str]]] = {
    GRPOConfig: (_ALIASES, _UNSUPPORTED),
    SFTConfig: (
        {
            "lr": "learning_rate",
            "per_device_train_batch_size": "batch_size",
            "dataset": "train_data",
            "train_dataset": "train_data",
            "eval_dataset": "eval_data",
            "model": "model_name_or_path",
            "max_seq_length": "max_completion_length",
            "max_length": "max_completion_length",
            "lr_scheduler": "lr_scheduler_type",
            "warmup": "warmup_steps",
            "grad_clip": "max_grad_norm",
            "epochs": "num_train_epochs",
        },
        {
            "completion_only_loss": "the loss is always on completion tokens only (TRL's completion_only_loss)",
            "assistant_only_loss": "with chat messages the loss is on the last (assistant) message only",
            "packing": "rows are padded, not packed",
            "dataset_text_field": "give prompt and completion columns, or chat messages",
            "logging_steps": "metrics are logged every step",
            "warmup_ratio": "set warmup_steps",
        },
    ),
    SampleConfig: (
        {
            "model": "model_name_or_path",
            "dataset": "data",
            "train_data": "data",
            "k": "num_generations",
            "n": "num_generations",
            "num_samples": "num_generations",
            "threshold": "reward_threshold",
            "max_new_tokens": "max_completion_length",
            "rollout_chunk_prompts": "chunk_prompts",
        },
        {},
    ),
}
_COMMANDS: dict[type, str] = {GRPOConfig: "train", SFTConfig: "sft", SampleConfig: "sample"}
#: ``python -m trainer fields COMMAND`` prints the options of this class.
CONFIG_CLASSES: dict[str, type] = {name: cls for cls, name in _COMMANDS.items()}


def _plain(c: Any) -> dict[str, Any]:
    """A config's fields as plain values (tuples as lists), secrets as ``None``."""
    values = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(c).items()}
    values.update({k: None for k in _SECRETS if k in values})
    return values


def _redacted_repr(c: Any) -> str:
    shown = ", ".join(
        f"{f.name}={'<redacted>' if f.name in _SECRETS and getattr(c, f.name) else repr(getattr(c, f.name))}"
        for f in dataclasses.fields(c)
    )
    return f"{type(c).__name__}({shown})"


def _fix(name: str, value: Any, rule: str, hint: str) -> ConfigError:
    return ConfigError(f"{name}={value!r}: {rule}. {hint}")


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
    if c.logprobs_chunk_tokens is not None and c.logprobs_chunk_tokens < 1:
        raise _fix(
            "logprobs_chunk_tokens", c.logprobs_chunk_tokens, "must be >= 1 or null", "1024 suits a 152k vocabulary."
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


# ------------------------------------------------------------------------ checks shared by the configs


def _check_positive(c: Any, *names: str) -> None:
    for name in names:
        if getattr(c, name) < 1:
            raise _fix(name, getattr(c, name), "must be >= 1", f"Set {name}: 1 or more.")


def _check_non_negative(c: Any, *names: str) -> None:
    for name in names:
        if getattr(c, name) < 0:
            raise _fix(name, getattr(c, name), "must be >= 0", "Use 0 to turn it off.")


def _check_sampling(c: Any, *, training: bool) -> None:
    """``temperature``, ``top_p``, ``top_k`` and ``max_prompt_length`` of a config that samples."""
    if c.max_prompt_length is not None and c.max_prompt_length < 1:
        raise _fix("max_prompt_length", c.max_prompt_length, "must be >= 1 or null", "Use null to keep whole prompts.")
    if training and c.temperature <= 0:
        raise _fix(
            "temperature", c.temperature, "must be > 0 for training (GRPO needs sampled, diverse groups)", "Use 1.0."
        )
    if c.temperature < 0:
        raise _fix("temperature", c.temperature, "must be >= 0", "Use 0 for greedy decoding, 1.0 to sample.")
    if not 0 < c.top_p <= 1:
        raise _fix("top_p", c.top_p, "must be in (0, 1]", "Use 1.0 to keep every token.")
    if c.top_k < 0:
        raise _fix("top_k", c.top_k, "must be >= 0", "Use 0 to keep every token.")


def _check_optimizer(c: Any) -> None:
    """The AdamW and schedule fields that ``GRPOConfig`` and ``SFTConfig`` share."""
    if not 0 < c.learning_rate < 1:
        raise _fix("learning_rate", c.learning_rate, "must be in (0, 1)", "Typical GRPO values are 1e-6 to 1e-5.")
    for name in ("weight_decay", "max_grad_norm"):
        if getattr(c, name) < 0:
            raise _fix(name, getattr(c, name), "must be >= 0", f"Set {name}: 0 to turn it off.")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(c, name) < 1:
            raise _fix(name, getattr(c, name), "must be in [0, 1)", "The usual values are 0.9 and 0.999.")
    if c.adam_epsilon <= 0:
        raise _fix("adam_epsilon", c.adam_epsilon, "must be > 0", "Keep the default.")
    _check_non_negative(c, "warmup_steps")
    if c.lr_scheduler_type not in LR_SCHEDULERS:
        raise _fix("lr_scheduler_type", c.lr_scheduler_type, f"must be one of {LR_SCHEDULERS}", "Use 'linear'.")


def _check_reward_client(c: Any) -> None:
    """The reward-server fields that ``GRPOConfig`` and ``SampleConfig`` share."""
    if c.reward_wait_ready_s < 0:
        raise _fix("reward_wait_ready_s", c.reward_wait_ready_s, "must be >= 0", "Set reward_wait_ready_s: 0.")
    if c.reward_timeout_s <= 0:
        raise _fix("reward_timeout_s", c.reward_timeout_s, "must be > 0", "Keep the default.")
    if not c.reward_retry_deadline_s >= 0:
        raise _fix("reward_retry_deadline_s", c.reward_retry_deadline_s, "must be >= 0", "Keep the default (300).")
    if c.reward_max_retries is not None:
        _check_non_negative(c, "reward_max_retries")
    _check_components(c.reward_components)
    if not c.reward_server_urls:
        raise _fix(
            "reward_server_urls",
            c.reward_server_urls,
            "needs at least one URL",
            "Start a server: python -m reward_server.",
        )
    for url in c.reward_server_urls:
        _check_url(url)


def _check_run(c: Any) -> None:
    """Seed, checkpoints and hardware fields; each config checks the ones it has."""
    if not 0 <= c.seed < 2**32:
        raise _fix("seed", c.seed, "must be in [0, 2**32)", "NumPy seeds only take that range; use e.g. 42.")
    if c.device not in ("auto", "cpu", "cuda"):
        raise _fix("device", c.device, "must be auto, cpu or cuda", "Use auto.")
    if getattr(c, "save_total_limit", None) is not None and c.save_total_limit < 1:
        raise _fix("save_total_limit", c.save_total_limit, "must be >= 1 or null", "Use null to keep every checkpoint.")
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


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


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


#: String options where whitespace is a value (a blank line separates steps).
_WHITESPACE_OK = frozenset({"step_separator"})


def _check_types(c: Any) -> None:
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        tp = _hints(type(c))[f.name]
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
        if isinstance(value, str) and not (value if f.name in _WHITESPACE_OK else value.strip()):
            hint = "use null to leave it unset" if _matches(None, tp) else "give a value"
            raise ConfigError(f"{f.name}={value!r}: must not be empty; {hint}.")


def _coerce(cls: type, name: str, value: Any) -> Any:
    """YAML-level conveniences: ``1e-5`` (PyYAML reads it as a string) to float, lists to tuples."""
    tp = _hints(cls)[name]
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


def config_from_dict(values: dict[str, Any], *, source: str = "config", cls: type[C] = GRPOConfig) -> C:  # type: ignore[assignment]
    """Build and validate a config (:class:`GRPOConfig` unless ``cls`` names another) from plain values.

    Raises:
        ConfigError: an unknown key (with the closest known name), a missing required key, a wrong type or an
            invalid value.
    """
    for key in values:
        _check_key(key, source, cls)
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    missing = [k for k in required if k not in values]
    if missing:
        docs = field_docs(cls)
        raise ConfigError(f"{source} lacks required option(s) {missing}: {', '.join(docs[k] for k in missing)}")
    return cls(**{k: _coerce(cls, k, v) for k, v in values.items()})


def _check_key(key: Any, source: str, cls: type = GRPOConfig) -> None:
    """Refuse an option name that is not a field of ``cls``, with the closest known name (or what to use instead)."""
    known = {f.name for f in dataclasses.fields(cls)}
    aliases, unsupported = _TABLES.get(cls, ({}, {}))
    if not isinstance(key, str):
        raise ConfigError(f"option names are strings; got {key!r} in {source}")
    if key not in known:
        if key in unsupported:
            raise ConfigError(f"option {key!r} in {source} is not supported: {unsupported[key]}.")
        close = [aliases[key]] if key in aliases else difflib.get_close_matches(key, known, n=1)
        command = _COMMANDS.get(cls, "train")
        hint = f" Did you mean {close[0]!r}?" if close else f" Run `python -m trainer fields {command}` for the list."
        raise ConfigError(f"unknown option {key!r} in {source}.{hint}")


def load_config(
    path: str | Path,
    overrides: dict[str, Any] | None = None,
    cls: type[C] = GRPOConfig,  # type: ignore[assignment]
) -> C:
    """Read a YAML config, apply ``overrides`` (e.g. from ``--set key=value``), validate as ``cls``.

    Relative paths in the file stay relative to the current directory, as on the command line.

    Raises:
        ConfigError: the file is a directory, not UTF-8, not valid YAML (or repeats a key), not a mapping, or what
            :func:`config_from_dict` raises.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    for key, value in (overrides or {}).items():  # a name given on the command line is its mistake, not the file's
        _check_key(key, f"--set {key}={value}", cls)
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
    return config_from_dict(values, source=str(path), cls=cls)


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


def field_docs(cls: type = GRPOConfig) -> dict[str, str]:
    """Each field's one-line docstring, read from this module's source (the string under the field)."""
    if cls not in _DOCS:
        _DOCS[cls] = _read_field_docs(cls)
    return _DOCS[cls]


_DOCS: dict[type, dict[str, str]] = {}


def _read_field_docs(cls: type) -> dict[str, str]:
    tree = ast.parse(inspect.getsource(cls))
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
    "CONFIG_CLASSES",
    "ConfigError",
    "GRPOConfig",
    "SFTConfig",
    "SampleConfig",
    "config_from_dict",
    "field_docs",
    "load_config",
    "names_a_local_path",
    "parse_overrides",
]
