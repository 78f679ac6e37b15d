"""Checkpoints: the policy in Hugging Face format plus everything a resume needs to continue the same run.

Layout of ``output_dir/checkpoint-<step>/``:

* ``config.json``, ``model.safetensors``, ``generation_config.json``, tokenizer files: ``from_pretrained`` loads
  the policy directly for evaluation or serving;
* ``trainer_state.pt``: optimizer and scheduler state, the step, and the Python, NumPy and torch (CPU and CUDA)
  RNG states, so sampling after a resume draws what the uninterrupted run would have drawn;
* ``grpo_config.yaml`` (``sft_config.yaml`` for SFT): the config of the run that wrote it;
* ``loop_state.json``: the loop's own counters (where the prompt order stands, when the reference was synced);
* ``ref_model/``: the reference model, only when ``sync_ref_model`` has moved it away from where it started.

A checkpoint is written to a temporary directory and renamed into place, so a crash mid-save never leaves a
half checkpoint that ``latest`` would pick.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.distributed import Distributed
from trainer.optim import resume_lr

logger = logging.getLogger("trainer")
STATE_FILE = "trainer_state.pt"
LOOP_STATE_FILE = "loop_state.json"
REF_MODEL_DIR = "ref_model"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def rng_state() -> dict[str, Any]:
    """The state of every RNG the run draws from."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    *,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    config: dict[str, Any],
    save_total_limit: int | None = None,
    rng: dict[str, Any] | None = None,
    rng_ranks: list[dict[str, Any]] | None = None,
    model_state_dict: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    config_file: str = "grpo_config.yaml",
    loop_state: dict[str, Any] | None = None,
    ref_model: PreTrainedModel | None = None,
    ref_state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write ``output_dir/checkpoint-<step>`` and prune old ones beyond ``save_total_limit``.

    ``rng`` is the RNG state to store (what :func:`rng_state` returned earlier); ``None`` stores the current one.
    ``config`` is written as YAML to ``config_file`` (``sft_config.yaml`` for ``python -m trainer sft``),
    ``loop_state`` (plain JSON values) to ``loop_state.json``, and ``ref_model`` to ``ref_model/``.
    A checkpoint saved when a step failed part-way stores the state from the start of that step, so that the
    resumed run draws what an uninterrupted one would have drawn.

    Args:
        rng_ranks: with several processes, every rank's RNG state in rank order (``rng`` is rank 0's).
        model_state_dict: the whole state dict when ``model``'s own is sharded (FSDP); ``None`` uses the model's.
        optimizer_state: the optimizer state to store when ``optimizer.state_dict()`` is sharded (FSDP).
        ref_state_dict: the reference model's whole state dict when its own is sharded (FSDP).

    Returns:
        The checkpoint directory.
    """
    output_dir = Path(output_dir)
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if model_state_dict is None:
        model.save_pretrained(tmp)
    else:
        model.save_pretrained(tmp, state_dict=model_state_dict)
    tokenizer.save_pretrained(tmp)
    state: dict[str, Any] = {
        "step": step,
        "optimizer": optimizer_state if optimizer_state is not None else optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng if rng is not None else rng_state(),
    }
    if rng_ranks is not None:
        state["rng_ranks"] = rng_ranks
    torch.save(state, tmp / STATE_FILE)
    (tmp / config_file).write_text(yaml.safe_dump(config, sort_keys=False))
    if loop_state is not None:
        (tmp / LOOP_STATE_FILE).write_text(json.dumps(loop_state))
    if ref_model is not None:
        ref_model.save_pretrained(tmp / REF_MODEL_DIR, state_dict=ref_state_dict)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    if save_total_limit is not None:
        for old in list_checkpoints(output_dir)[:-save_total_limit]:
            shutil.rmtree(old)
    return final


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in output_dir.iterdir()
        if (m := _CHECKPOINT_RE.match(p.name)) and (p / STATE_FILE).exists()
    ]
    return [p for _, p in sorted(found)]


def resolve_checkpoint(resume_from: str, output_dir: str | Path) -> Path:
    """``latest`` to the newest checkpoint in ``output_dir``, otherwise the given directory.

    Raises:
        FileNotFoundError: no checkpoint there (the message says where it looked).
    """
    if resume_from == "latest":
        found = list_checkpoints(output_dir)
        if not found:
            raise FileNotFoundError(f"resume_from_checkpoint=latest but {output_dir} holds no checkpoint-<step>")
        return found[-1]
    path = Path(resume_from)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"{path} is not a checkpoint: {STATE_FILE} is missing")
    return path


def read_loop_state(checkpoint: Path) -> dict[str, Any]:
    """What ``loop_state.json`` holds (``{}`` for a checkpoint written before it existed)."""
    path = checkpoint / LOOP_STATE_FILE
    return dict(json.loads(path.read_text())) if path.exists() else {}


def load_training_state(
    checkpoint: Path,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    *,
    rank: int = 0,
    world_size: int = 1,
    load_optimizer_state: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Restore optimizer, scheduler and RNG states from ``checkpoint``; returns the step it was saved at.

    Args:
        rank, world_size: this process among the training processes; each rank restores its own RNG state. A run
            resumed on another number of processes cannot repeat the old one's sampling: each rank then reseeds
            from the stored state and its rank (and a warning says so).
        load_optimizer_state: restores the stored optimizer state (FSDP's loader); default
            ``optimizer.load_state_dict``.
    """
    # weights_only=False: the state holds NumPy's RNG tuple; the file is one this trainer wrote.
    state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=False)
    (load_optimizer_state or optimizer.load_state_dict)(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    ranks = state.get("rng_ranks") or [state["rng"]]
    if len(ranks) == world_size:
        set_rng_state(ranks[rank])
    else:
        logger.warning(
            "%s was written by %d process(es) and is resumed on %d: sampling will differ from the run's",
            checkpoint,
            len(ranks),
            world_size,
        )
        set_rng_state(ranks[0])
        seed = int(torch.randint(2**31, ()).item()) + rank
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
    return int(state["step"])


def save_on_ranks(
    dist: Distributed,
    output_dir: Path,
    step: int,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    rng: dict[str, Any] | None = None,
    ref_model: Any = None,
    **fields: Any,
) -> Path:
    """:func:`save_checkpoint` from every rank: FSDP gathers the weights (``model``'s and ``ref_model``'s) and the
    optimizer state, each rank's RNG state is gathered, rank 0 writes, and all wait until it has.

    Args:
        dist: this process among the training processes (one process: it writes).
        rng: this rank's RNG state to store; ``None`` stores the current one.
        ref_model: the reference model to store (``ref_model/``), or ``None``.
        fields: the other arguments of :func:`save_checkpoint` (tokenizer, scheduler, config, ...).

    Returns:
        The checkpoint directory (on every rank).
    """
    rng = rng if rng is not None else rng_state()
    rng_ranks = dist.gather_objects([rng]) if dist.is_distributed else None
    model_state = dist.full_state_dict(model)
    optimizer_state = dist.optimizer_state(model, optimizer)
    ref_state = dist.full_state_dict(ref_model) if ref_model is not None else None
    path = output_dir / f"checkpoint-{step}"
    if dist.is_main:
        path = save_checkpoint(
            output_dir,
            step,
            model=model,
            optimizer=optimizer,
            rng=rng,
            rng_ranks=rng_ranks,
            model_state_dict=model_state,
            optimizer_state=optimizer_state,
            ref_model=ref_model,
            ref_state_dict=ref_state,
            **fields,
        )
    dist.barrier()
    return path


def restore_on_ranks(
    dist: Distributed, checkpoint: Path, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any
) -> int:
    """:func:`load_training_state` on this rank (its own RNG state; FSDP's optimizer loader), then the rate of the
    next update from this run's schedule (:func:`trainer.optim.resume_lr`). Returns the step it was saved at."""
    step = load_training_state(
        checkpoint,
        optimizer,
        scheduler,
        rank=dist.rank,
        world_size=dist.world_size,
        load_optimizer_state=lambda state: dist.load_optimizer_state(model, optimizer, state),
    )
    resume_lr(optimizer, scheduler)
    return step
