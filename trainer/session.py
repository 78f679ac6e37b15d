"""What ``train``, ``sft`` and ``sample`` build before their first step, built one way for all three.

:func:`open_session` picks the device and the dtype, seeds every RNG, makes the run directory and resolves the
checkpoint to resume from; the :class:`Session` it returns builds the optimizer (restored from that checkpoint)
and the metrics log. :func:`load_tokenizer`, :func:`load_model` and :func:`load_models` (the policy with LoRA and
its reference) load what the config names, and fail with a :class:`~trainer.config.ConfigError` that says how to
fix a path that holds no model. The ranks themselves (:class:`~trainer.distributed.Distributed`) are the caller's:
it creates them first and closes them last.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from trainer.checkpoint import REF_MODEL_DIR, resolve_checkpoint, restore_on_ranks
from trainer.config import ConfigError, GRPOConfig, names_a_local_path
from trainer.distributed import Distributed
from trainer.metrics import MetricsLogger
from trainer.optim import OptimizerFields, build_optimizer
from trainer.weights import apply_lora, forward_module, load_lora, reference_context


class _Runtime(Protocol):
    """The fields :func:`open_session` reads (``GRPOConfig`` and ``SFTConfig`` have them)."""

    @property
    def device(self) -> str: ...
    @property
    def bf16(self) -> bool | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def torch_num_threads(self) -> int | None: ...
    @property
    def output_dir(self) -> str: ...
    @property
    def resume_from_checkpoint(self) -> str | None: ...
    @property
    def report_to_tensorboard(self) -> bool: ...


class _Names(Protocol):
    """The fields :func:`load_tokenizer` reads (every config has them)."""

    @property
    def model_name_or_path(self) -> str: ...
    @property
    def tokenizer_name_or_path(self) -> str | None: ...


# --------------------------------------------------------------------------------------------- device, dtype, seed


def wants_cuda(config: Any) -> bool:
    """``device: cuda``, or ``auto`` where CUDA is present."""
    return bool(config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()))


def uses_bf16(config: Any, device: torch.device) -> bool:
    """bf16 autocast: on CUDA only, where ``bf16`` asks for it (``None``: where the GPU supports it)."""
    return device.type == "cuda" and (config.bf16 if config.bf16 is not None else torch.cuda.is_bf16_supported())


def autocast(use_bf16: bool) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA when ``use_bf16``; otherwise nothing."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()


def set_threads(config: Any) -> None:
    """``torch_num_threads`` CPU threads for torch, when set."""
    if config.torch_num_threads is not None:
        torch.set_num_threads(config.torch_num_threads)


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
        self, model: Any, params: Iterable[torch.nn.Parameter], config: OptimizerFields, num_updates: int
    ) -> tuple[torch.optim.Optimizer, Any, int]:
        """AdamW over ``params`` with its schedule over ``num_updates`` steps (:func:`trainer.optim.build_optimizer`),
        restored with ``model`` from the checkpoint when there is one.

        Returns:
            ``(optimizer, scheduler, start_step)``: ``start_step`` is the checkpoint's step, or 0.
        """
        optimizer, scheduler = build_optimizer(params, config, num_updates)
        start_step = restore_on_ranks(self.dist, self.checkpoint, model, optimizer, scheduler) if self.checkpoint else 0
        return optimizer, scheduler, start_step

    def metrics_log(self, config: _Runtime, start_step: int) -> MetricsLogger | None:
        """The metrics file and TensorBoard writer, on the main process only (``None`` on the others)."""
        if not self.dist.is_main:
            return None
        return MetricsLogger(self.output_dir, tensorboard=config.report_to_tensorboard, resume_step=start_step)


def open_session(config: _Runtime, dist: Distributed) -> Session:
    """Set torch's threads, pick this rank's device and the dtype, seed every RNG (``seed + rank``: dropout masks
    and samples differ per rank), create ``output_dir`` and resolve ``resume_from_checkpoint``.

    Raises:
        FileNotFoundError: ``resume_from_checkpoint`` names no checkpoint.
    """
    set_threads(config)
    device = dist.device(wants_cuda(config))
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


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def load_tokenizer(config: _Names) -> PreTrainedTokenizerBase:
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
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
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
