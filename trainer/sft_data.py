"""SFT rows into tensors: reading a row's prompt and completion, tokenising it as ``train`` renders prompts, padding
a batch, and the completion tokens' negative log-likelihood. ``python -m trainer sft`` trains on them
(:mod:`trainer.sft`), and ``train``'s PPO-ptx term (:mod:`trainer.ptx`) on the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jinja2
import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from trainer.data import DataError, first_line
from trainer.rollout.base import PromptEncoder

logger = logging.getLogger("trainer")

IGNORE_INDEX = -100
"""Label of a token that is not trained on (prompt, padding)."""


@dataclass(frozen=True)
class SFTExample:
    """One tokenised row: the prompt's ids and the completion's ids (the EOS at the end included)."""

    prompt_ids: list[int]
    completion_ids: list[int]


class RowColumns(Protocol):
    """What reading and tokenising SFT rows takes from a config: :class:`SFTConfig`, or ``train``'s
    ``pretrain_data`` (:class:`trainer.ptx.PtxColumns`)."""

    @property
    def prompt_column(self) -> str: ...
    @property
    def completion_column(self) -> str: ...
    @property
    def messages_column(self) -> str: ...
    @property
    def max_prompt_length(self) -> int | None: ...
    @property
    def max_completion_length(self) -> int | None: ...


def row_prompt_and_completion(row: Mapping[str, Any], config: RowColumns, where: str) -> tuple[Any, str]:
    """A row's prompt (text or chat messages) and completion text.

    Raises:
        DataError: the row has neither a prompt and a completion nor chat messages ending with the assistant's,
            or a field has the wrong type (the message names the row and the column).
    """
    if config.prompt_column in row and row[config.prompt_column] is not None:
        prompt = row[config.prompt_column]
        if config.completion_column not in row:
            raise DataError(f"{where} has a {config.prompt_column!r} but no {config.completion_column!r} column")
        completion = row[config.completion_column]
        if isinstance(completion, list):  # TRL's conversational prompt-completion: [{"role": "assistant", ...}]
            if len(completion) != 1 or not _is_message(completion[0]) or completion[0]["role"] != "assistant":
                raise DataError(f"{where}: a list completion must hold exactly one assistant message")
            completion = completion[0]["content"]
    elif config.messages_column in row:
        messages = row[config.messages_column]
        if not isinstance(messages, list) or len(messages) < 2 or not all(_is_message(m) for m in messages):
            raise DataError(
                f"{where}: {config.messages_column} must be a list of at least two {{'role', 'content'}} messages"
            )
        if messages[-1]["role"] != "assistant":
            raise DataError(f"{where}: the last message must be the assistant's (it is the completion trained on)")
        prompt, completion = messages[:-1], messages[-1]["content"]
    else:
        raise DataError(
            f"{where} has neither {config.prompt_column!r} and {config.completion_column!r} nor "
            f"{config.messages_column!r} (columns: {sorted(row)}); set prompt_column/completion_column/messages_column"
        )
    if isinstance(prompt, list) and not all(_is_message(m) for m in prompt):
        raise DataError(f"{where}: chat prompts are lists of {{'role': str, 'content': str}}")
    if not isinstance(prompt, str | list):
        raise DataError(f"{where}: the prompt must be a string or chat messages, got {type(prompt).__name__}")
    if not isinstance(completion, str) or not completion.strip():
        raise DataError(f"{where}: the completion must be a non-empty string, got {completion!r:.80}")
    return prompt, completion


def _is_message(m: Any) -> bool:
    return isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


def encode_rows(
    rows: Sequence[Mapping[str, Any]],
    encoder: PromptEncoder,
    tokenizer: PreTrainedTokenizerBase,
    eos_token_id: int,
    config: RowColumns,
    source: str,
    names: Sequence[str] | None = None,
) -> list[SFTExample]:
    """Tokenise every row before training, so a bad row fails now with its number, not mid-run.

    ``names`` says where each row is (``data.jsonl:3``, as :func:`trainer.data.read_named_rows` gives it); by
    default ``{source} row {i}``, counted from 1.

    Prompts keep their end under ``max_prompt_length`` (as in ``train``), completions their start under
    ``max_completion_length``; both cuts are counted in a warning.

    Raises:
        DataError: what :func:`row_prompt_and_completion` raises, or a prompt the chat template refuses.
    """
    examples, cut_prompts, cut_completions = [], 0, 0
    for i, row in enumerate(rows):
        where = names[i] if names is not None else f"{source} row {i + 1}"
        prompt, completion = row_prompt_and_completion(row, config, where)
        try:
            prompt_ids = encoder.token_ids(prompt)
        except (ValueError, TypeError, jinja2.TemplateError) as exc:
            raise DataError(f"{where}: the prompt cannot be rendered: {first_line(exc)}") from exc
        completion_ids = [*tokenizer(completion, add_special_tokens=False)["input_ids"], eos_token_id]
        if config.max_prompt_length is not None and len(prompt_ids) > config.max_prompt_length:
            prompt_ids, cut_prompts = prompt_ids[-config.max_prompt_length :], cut_prompts + 1
        if config.max_completion_length is not None and len(completion_ids) > config.max_completion_length:
            completion_ids, cut_completions = completion_ids[: config.max_completion_length], cut_completions + 1
        if not prompt_ids:
            raise DataError(f"{where}: the prompt gives no token")
        examples.append(SFTExample(prompt_ids, completion_ids))
    if cut_prompts or cut_completions:
        logger.warning(
            "%s: %d prompts lost their start to max_prompt_length=%s and %d completions their end (and EOS) to "
            "max_completion_length=%s; raise them or set them to null to keep the rows whole",
            source,
            cut_prompts,
            config.max_prompt_length,
            cut_completions,
            config.max_completion_length,
        )
    return examples


def collate(examples: Sequence[SFTExample], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (``IGNORE_INDEX`` off the completion).

    Returns:
        ``{"input_ids", "attention_mask", "labels"}``, each ``(B, L)`` long, ``L`` the longest prompt + completion.
    """
    width = max(len(e.prompt_ids) + len(e.completion_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)  # (B, L)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(examples), width), dtype=torch.long)  # (B, L)
    for k, e in enumerate(examples):
        p, n = len(e.prompt_ids), len(e.prompt_ids) + len(e.completion_ids)
        ids[k, :n] = torch.tensor(e.prompt_ids + e.completion_ids)
        labels[k, p:n] = torch.tensor(e.completion_ids)
        mask[k, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def completion_nll(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, int, int]:
    """Summed negative log-likelihood of the completion tokens, their number, and how many the argmax predicts.

    Args:
        model: a causal LM (or its DDP/FSDP wrapper) on the batch's device.
        batch: what :func:`collate` returns, on that device.

    Returns:
        ``(nll_sum, num_tokens, num_correct)``: a scalar with grad (nats), and two ints.
    """
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    logits = logits[:, :-1, :].float()  # (B, L-1, V): position t predicts token t + 1
    targets = batch["labels"][:, 1:]  # (B, L-1)
    nll = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=IGNORE_INDEX, reduction="sum")
    counted = targets != IGNORE_INDEX  # (B, L-1)
    correct = (logits.detach().argmax(-1) == targets) & counted
    return nll, int(counted.sum()), int(correct.sum())
