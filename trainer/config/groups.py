"""The option groups that the commands' configs are composed of, each option defined once.

A group is a frozen, keyword-only dataclass: its fields, each with its one-line docstring, under the section
comment that the config reference (``docs/trainer/config.md``) heads them with. :class:`~trainer.config.GRPOConfig`,
:class:`~trainer.config.SFTConfig` and :class:`~trainer.config.SampleConfig` inherit the groups they need; the
YAML keys stay flat (``learning_rate: 1e-6``, not ``optimizer: {lr: ...}``), as in TRL. Where a command needs
another default (``sft``'s learning rate, ``sample``'s share of GPU memory), it redeclares only that default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict


class Options:
    """The base of every group: pydantic reads the docstring under each field (:func:`trainer.config.field_docs`)."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(use_attribute_docstrings=True)


@dataclass(frozen=True, kw_only=True)
class ModelOptions(Options):
    """The model and its tokenizer (every command)."""

    # ------------------------------------------------------------------ model and data
    model_name_or_path: str
    """Model to train or sample: a Hugging Face model directory (or hub id) loadable with ``AutoModelForCausalLM``."""
    tokenizer_name_or_path: str | None = None
    """Tokenizer to use; ``None`` takes the one stored with ``model_name_or_path``."""


@dataclass(frozen=True, kw_only=True)
class DataOptions(Options):
    """The training rows and the held-out rows (``train`` and ``sft``)."""

    # ------------------------------------------------------------------ model and data
    train_data: str
    """Training rows: a .jsonl, .json, .parquet or .csv file, a ``save_to_disk`` directory, or a hub dataset."""
    train_split: str = "train"
    """Split to read when ``train_data`` is a ``datasets`` dataset with several splits."""
    eval_data: str | None = None
    """Held-out rows (same formats as ``train_data``): pass@1 in ``train``, ``eval/loss`` in ``sft``; ``None``: none."""
    eval_split: str = "test"
    """Split to read when ``eval_data`` is a ``datasets`` dataset with several splits."""


@dataclass(frozen=True, kw_only=True)
class PromptOptions(Options):
    """How a prompt is read and rendered (every command renders prompts the same way)."""

    # ------------------------------------------------------------------ model and data
    prompt_column: str = "prompt"
    """Column holding the prompt: a string, or a list of chat messages ``{"role", "content"}``."""
    apply_chat_template: bool = True
    """Render prompts with the tokenizer's chat template when it has one (a string becomes one user message)."""
    max_prompt_length: int | None = 512
    """Prompt tokens kept (the end is kept, the start cut); ``None`` keeps all."""


@dataclass(frozen=True, kw_only=True)
class RewardServerOptions(Options):
    """The reward client (``train`` and ``sample``)."""

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


@dataclass(frozen=True, kw_only=True)
class SamplingOptions(Options):
    """The sampling knobs (``train`` and ``sample``); ``train``'s loss renormalises its log-probs the same way."""

    # ------------------------------------------------------------------ generation
    max_completion_length: int = 512
    """Most tokens generated per completion; a completion that reaches it without EOS is truncated."""
    temperature: float = 1.0
    """Sampling temperature (``train``'s log-probs use the same one, so ratios match the sampler); 0: greedy."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set with this much probability (1.0 keeps all)."""
    top_k: int = 0
    """Keep only the k most likely tokens when sampling (0 keeps all)."""
    cache_implementation: Literal["dynamic", "static"] = "dynamic"
    """transformers backend: ``static`` decodes over a fixed-size KV cache, each token a CUDA graph replay on a GPU."""


@dataclass(frozen=True, kw_only=True)
class OptimizerOptions(Options):
    """AdamW, its learning-rate schedule and gradient accumulation (``train`` and ``sft``)."""

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
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; the step's completions (``sft``: rows) are split evenly between them."""


@dataclass(frozen=True, kw_only=True)
class CheckpointOptions(Options):
    """The run directory, evaluation cadence, checkpoints and metrics files (``train`` and ``sft``)."""

    # ------------------------------------------------------------------ evaluation, logging, checkpoints
    output_dir: str = "runs/grpo"
    """Directory for metrics (``metrics.jsonl``, TensorBoard), checkpoints and curves."""
    eval_steps: int = 0
    """Evaluate every this many steps (0: only at start and end when ``eval_data`` is set)."""
    save_steps: int = 0
    """Save a checkpoint every this many steps (0: only at the end)."""
    save_total_limit: int | None = None
    """Keep only the newest this many checkpoints; ``None`` keeps all."""
    resume_from_checkpoint: str | None = None
    """A checkpoint directory to continue from, or ``latest`` for the newest one in ``output_dir``."""
    report_to_tensorboard: bool = True
    """Also write metrics as TensorBoard events under ``output_dir/tensorboard``."""


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions(Options):
    """Seed, device, dtype and threads (every command)."""

    # ------------------------------------------------------------------ hardware
    seed: int = 42
    """Seed of Python, NumPy and torch (and of ``sft``'s row order); with it a run repeats exactly on one machine."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to run: ``auto`` picks CUDA when present."""
    bf16: bool | None = None
    """bf16 autocast on CUDA (``None``: on when the GPU supports it); never used on CPU."""
    torch_num_threads: int | None = None
    """CPU threads for torch (``None`` keeps torch's default)."""
    reuse_freed_memory: bool = True
    """On CPU under glibc, keep freed memory for the next step (``mallopt``, :mod:`trainer.allocator`), x1.11 faster."""
    progress_bar: bool = True
    """Show a tqdm progress bar with the latest reward (``train``), loss (``sft``) or pass@1 (``sample``)."""


@dataclass(frozen=True, kw_only=True)
class ScaleOptions(Options):
    """Memory and several processes (``train`` and ``sft``)."""

    # ------------------------------------------------------------------ hardware
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save GPU memory (CUDA only)."""
    fsdp: bool = False
    """With several processes (``torchrun``), shard the model over them with FSDP2 instead of DDP replicas."""


@dataclass(frozen=True, kw_only=True)
class VLLMOptions(Options):
    """A vLLM engine instead of transformers' ``generate`` (``train`` and ``sample``)."""

    # ------------------------------------------------------------------ vLLM rollouts
    use_vllm: bool = False
    """Sample with a vLLM engine (the vllm extra) instead of transformers' ``generate``."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of GPU memory the engine may take (CUDA; on CPU the KV cache is sized for the batch)."""
    vllm_enforce_eager: bool | None = None
    """Run the engine without torch.compile and CUDA graphs; ``None``: eager on CPU, compiled on CUDA."""


@dataclass(frozen=True, kw_only=True)
class LoRAOptions(Options):
    """LoRA adapters (peft) instead of training every weight (``train``)."""

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


@dataclass(frozen=True, kw_only=True)
class ToolOptions(Options):
    """Tool-integrated rollouts: the policy calls the sandbox's Python during its rollouts (``train``)."""

    # ------------------------------------------------------------------ tools
    tools: tuple[str, ...] | None = None
    """Tools the policy may call during rollouts: ``[python]`` (the reward server's sandbox); ``None``: no tools."""
    tool_call_format: str = "code_block"
    """``code_block`` (a fenced python block, answered in an output block; ToRL) or ``qwen_json`` (``<tool_call>``)."""
    max_tool_calling_iterations: int = 4
    """Most tool calls per completion (TRL's name); a further call ends the completion as truncated."""
    tool_server_urls: tuple[str, ...] | None = None
    """Servers of ``POST /v1/tools/python``; ``None``: the reward servers (``reward_server_urls``)."""
    tool_timeout_s: float | None = 10.0
    """Time limit of one tool call on the server, in seconds; ``None``: the server's default."""
    tool_output_max_chars: int = 2000
    """Most characters of one call's output put back into the context (the end is kept)."""
    tool_retry_deadline_s: float = 300.0
    """Seconds a tool batch is retried (connection errors, 429, 503) before the run stops."""


#: Fields that are never written out or logged in clear.
_SECRETS = ("reward_api_key",)


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
