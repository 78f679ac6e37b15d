"""Supervised fine-tuning with the loss on completion tokens only: ``python -m trainer sft --config SFT.yaml``.

This is DeepSeek-R1's cold start (arXiv 2501.12948, section 2.3.1: a few thousand long chains of thought before
RL) and its second SFT on the rejection-sampled set (section 2.3.3, the rows ``python -m trainer sample``
writes). A row is ``prompt`` + ``completion`` (each a string; the prompt may be chat messages, the completion a
list holding one assistant message, as in TRL's prompt-completion format) or chat ``messages`` whose last message,
the assistant's, is the completion.

The prompt is rendered and tokenised exactly as ``train`` renders GRPO prompts (:class:`trainer.rollout.
PromptEncoder`: the chat template with the generation prompt, the end kept under ``max_prompt_length``), and the
completion is tokenised on its own and ended with the model's first EOS id, so the policy learns exactly the
token sequences GRPO will sample and score. The loss is the token-mean negative log-likelihood of the completion
tokens of the whole step (EOS included; prompt and padding are not trained on), so gradient accumulation gives
the gradient of one big batch.

One step: take ``batch_size`` rows (a fresh permutation per epoch, a function of ``(seed, step)``, so a resume
continues with the same rows), split them into ``gradient_accumulation_steps`` micro-batches, backward, clip,
AdamW step. Checkpoints, resume, metrics (``metrics.jsonl``, TensorBoard), the progress bar and several
processes (``torchrun``: DDP, or FSDP2 with ``fsdp``) are ``train``'s.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from trainer.checkpoint import save_on_ranks
from trainer.config import ConfigError, SFTConfig
from trainer.data import prompt_indices, read_named_rows
from trainer.distributed import Distributed
from trainer.optim import current_lr
from trainer.rollout.base import PromptEncoder, SavedModel, eos_token_ids
from trainer.session import (
    TrainResult,
    check_local,
    enable_activation_checkpointing,
    load_model,
    load_tokenizer,
    open_session,
    wants_cuda,
    wrap_models,
)
from trainer.sft_data import SFTExample, collate, completion_nll, encode_rows

logger = logging.getLogger("trainer")


@torch.no_grad()
def evaluate_loss(
    model: PreTrainedModel,
    examples: Sequence[SFTExample],
    pad_token_id: int,
    batch_size: int,
    device: torch.device,
    autocast: Any,
) -> dict[str, float]:
    """``eval/loss`` (token-mean completion NLL, nats) and ``eval/token_accuracy`` on held-out rows."""
    was_training = model.training
    model.eval()
    nll, tokens, correct = 0.0, 0, 0
    try:
        for lo in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in collate(examples[lo : lo + batch_size], pad_token_id).items()}
            with autocast():
                s, n, c = completion_nll(model, batch)
            nll, tokens, correct = nll + float(s), tokens + n, correct + c
    finally:
        model.train(was_training)
    return {"eval/loss": nll / max(tokens, 1), "eval/token_accuracy": correct / max(tokens, 1)}


def num_sft_steps(config: SFTConfig, num_rows: int) -> int:
    """``max_steps``, or enough steps of ``batch_size`` rows for ``num_train_epochs`` passes (rounded up)."""
    if config.max_steps is not None:
        return config.max_steps
    return max(1, math.ceil(config.num_train_epochs * num_rows / config.batch_size))


def sft(config: SFTConfig) -> TrainResult:
    """Fine-tune as ``config`` says and return where the results are.

    Started by ``torchrun`` (or ``accelerate launch``), every process runs this, as for ``train``: each rank takes
    its contiguous share of the step's rows, gradients are averaged across ranks on the last micro-batch (DDP, or
    FSDP2 with ``fsdp``), the loss is normalised by the completion tokens of the whole step over all ranks, and
    rank 0 logs and writes the checkpoints. Held-out loss is computed on every rank over all held-out rows.

    Raises:
        trainer.data.DataError: unusable rows.
        trainer.config.ConfigError: a model or tokenizer that does not load, a checkpoint past the last step, or a
            ``batch_size`` that does not split over the processes and micro-batches.
        FileNotFoundError: ``resume_from_checkpoint`` names no checkpoint.
    """
    dist = Distributed.from_env(cuda=wants_cuda(config), fsdp=config.fsdp)
    try:
        return _sft(config, dist)
    finally:
        dist.close()


def _sft(config: SFTConfig, dist: Distributed) -> TrainResult:
    # ---------------------------------------------------------------- setup
    share = config.batch_size // dist.world_size
    if config.batch_size % dist.world_size or share % config.gradient_accumulation_steps:
        raise ConfigError(
            f"batch_size={config.batch_size} must split into {dist.world_size} process(es) x "
            f"gradient_accumulation_steps={config.gradient_accumulation_steps} equal micro-batches: use a multiple "
            f"of {dist.world_size * config.gradient_accumulation_steps}"
        )
    session = open_session(config, dist)  # the row order is the seed's; dropout masks differ per rank
    device, checkpoint, output_dir, autocast = session.device, session.checkpoint, session.output_dir, session.autocast
    train_rows, train_names = read_named_rows(config.train_data, config.train_split)
    eval_rows, eval_names = read_named_rows(config.eval_data, config.eval_split) if config.eval_data else ([], [])
    tokenizer = load_tokenizer(config)
    encoder = PromptEncoder(
        tokenizer, max_prompt_length=None, apply_chat_template=config.apply_chat_template
    )  # the prompt is cut below, where the cut is counted
    model_path = str(checkpoint or config.model_name_or_path)
    option = "resume_from_checkpoint" if checkpoint else "model_name_or_path"
    check_local(model_path, option, "model")
    # Every row is checked before the model loads: a bad row should not cost the loading first.
    eos = eos_token_ids(SavedModel(model_path), tokenizer)[0]
    train_examples = encode_rows(train_rows, encoder, tokenizer, eos, config, config.train_data, train_names)
    eval_examples = encode_rows(eval_rows, encoder, tokenizer, eos, config, config.eval_data or "", eval_names)
    model = load_model(model_path, device, False, option)
    model.train()
    if device.type == "cuda" and config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    _, train_model, _ = wrap_models(dist, model, None)  # FSDP shards in place: build the optimizer after it

    total_steps = num_sft_steps(config, len(train_examples))
    optimizer, scheduler, start_step = session.optimizer(model, model.parameters(), config, total_steps)
    if start_step > total_steps:
        raise ConfigError(f"the run has {total_steps} steps but {checkpoint} is at step {start_step}")
    metrics_log = session.metrics_log(config, start_step)
    history: list[dict[str, Any]] = []
    pad = encoder.pad_token_id
    micro = share // config.gradient_accumulation_steps

    def log(step: int, row: dict[str, Any]) -> None:
        if metrics_log is not None:
            metrics_log.log(step, row)
        history.append({"step": step, **row})

    def save(step: int) -> Path:
        return save_on_ranks(
            dist,
            output_dir,
            step,
            model=model,
            optimizer=optimizer,
            tokenizer=tokenizer,
            scheduler=scheduler,
            config=config.to_dict(),
            save_total_limit=config.save_total_limit,
            config_file="sft_config.yaml",
        )

    if eval_examples and start_step == 0:
        log(0, evaluate_loss(model, eval_examples, pad, config.eval_batch_size, device, autocast))

    # ---------------------------------------------------------------- steps
    bar = tqdm(total=total_steps, initial=start_step, disable=not (config.progress_bar and dist.is_main), desc="sft")
    try:
        for step in range(start_step, total_steps):
            step_start = time.perf_counter()
            rows = [
                train_examples[i] for i in prompt_indices(step, config.batch_size, len(train_examples), config.seed)
            ]
            num_tokens = sum(len(e.completion_ids) for e in rows)  # the step's normaliser: one big batch, all ranks
            mine = rows[dist.shard(len(rows))]
            nll_sum, correct = 0.0, 0
            for k, lo in enumerate(range(0, share, micro)):
                batch = {key: v.to(device) for key, v in collate(mine[lo : lo + micro], pad).items()}
                with dist.grad_sync(train_model, sync=k == config.gradient_accumulation_steps - 1):
                    with autocast():
                        nll, _, c = completion_nll(train_model, batch)
                    # DDP and FSDP average the ranks' gradients: times world_size gives the sum over all rows
                    (nll * dist.world_size / num_tokens).backward()
                nll_sum, correct = nll_sum + float(nll.detach()), correct + c
            max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
            grad_norm = dist.full_norm(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
            lr = current_lr(optimizer)  # the rate this update runs at
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            totals = dist.sum(torch.tensor([nll_sum, float(correct)], dtype=torch.float64))

            done = step + 1
            step_s = time.perf_counter() - step_start
            row: dict[str, Any] = {
                "loss/sft": float(totals[0]) / num_tokens,
                "sft/token_accuracy": float(totals[1]) / num_tokens,
                "sft/completion_tokens": float(num_tokens),
                "sft/epoch": done * config.batch_size / len(train_examples),
                "optim/lr": lr,
                "optim/grad_norm": grad_norm,
                "timing/step": step_s,
                "perf/tokens_per_s": sum(len(e.prompt_ids) + len(e.completion_ids) for e in rows) / step_s,
            }
            is_last = done == total_steps
            if eval_examples and (is_last or (config.eval_steps and done % config.eval_steps == 0)):
                row.update(evaluate_loss(model, eval_examples, pad, config.eval_batch_size, device, autocast))
            log(done, row)
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss/sft']:.3f}")
            if is_last or (config.save_steps and done % config.save_steps == 0):
                save(done)
    finally:
        bar.close()
        if metrics_log is not None:
            metrics_log.close()
    final = output_dir / f"checkpoint-{total_steps}"
    if checkpoint is not None and start_step == total_steps:
        final = checkpoint
    return TrainResult(output_dir=output_dir, checkpoint=final, history=history)
