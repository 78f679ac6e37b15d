"""Rollouts: the backend seam the loop samples through, and the batch types every backend returns.

:class:`GenerationBackend` is what the loop calls; :class:`trainer.rollout.transformers_backend.TransformersBackend`
implements it with the policy in transformers (sampling, left padding, KV cache, stop at EOS);
:class:`trainer.rollout.vllm.VLLMBackend` implements the same ``generate`` with a vLLM engine and returns the same
:class:`RolloutBatch`. :class:`PromptEncoder` renders and tokenises prompts as both do.

Shapes: ``N`` completions, ``P`` prompt tokens (left-padded), ``C`` completion tokens (right-padded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import AutoConfig, GenerationConfig, PreTrainedTokenizerBase

Prompt = str | Sequence[Mapping[str, str]]
"""A prompt: plain text, or chat messages ``[{"role": ..., "content": ...}]``."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions.

    Attributes:
        max_new_tokens: most tokens per completion.
        temperature: 0 decodes greedily; otherwise the softmax temperature.
        top_p: nucleus threshold (1.0 keeps all tokens).
        top_k: keep the k most likely tokens (0 keeps all).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    @classmethod
    def from_config(cls, config: Any) -> SamplingParams:
        """A config's sampling knobs (``max_completion_length``, ``temperature``, ``top_p``, ``top_k``), as
        ``train`` and ``sample`` have them."""
        return cls(config.max_completion_length, config.temperature, config.top_p, config.top_k)


@dataclass(frozen=True)
class RolloutBatch:
    """Prompts and their sampled completions, ready for scoring and the loss.

    Attributes:
        prompt_ids: ``(N, P)`` left-padded prompt tokens (each prompt repeated once per completion).
        prompt_mask: ``(N, P)`` 1 on real prompt tokens.
        completion_ids: ``(N, C)`` right-padded completion tokens.
        completion_mask: ``(N, C)`` 1 on completion tokens up to and including the first EOS.
        is_truncated: ``(N,)`` True where the completion reached the length limit without EOS.
        prompt_index: ``(N,)`` index of each completion's prompt in the list given to ``generate``; the loop
            turns it into a group id.
        completion_texts: decoded completions (special tokens skipped), one per row.
        sampling_log_probs: ``(N, C)`` log-probs of the sampled tokens as the sampler computed them (0 on
            padding), from backends whose sampler is not the policy's own forward (vLLM); ``None`` otherwise.
        tool_output_mask: ``(N, C)`` 1 on the tokens a tool wrote (tool-integrated rollouts,
            :mod:`trainer.tools.rollout`): they are in the context (``completion_mask`` is 1 there) but not the
            model's, so the loss, the KL and the entropy leave them out (:attr:`model_token_mask`); ``None``: none.
        tool_failed: ``(N,)`` True where a tool call hit an infrastructure fault (sandbox error, lost session):
            the rollout was cut short by no fault of the model, so it is not scored as wrong; ``None``: none.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    is_truncated: torch.Tensor
    prompt_index: torch.Tensor
    completion_texts: list[str]
    sampling_log_probs: torch.Tensor | None = None
    tool_output_mask: torch.Tensor | None = None
    tool_failed: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def model_token_mask(self) -> torch.Tensor:
        """``(N, C)`` 1 on the completion tokens the model sampled: ``completion_mask`` without tool output."""
        if self.tool_output_mask is None:
            return self.completion_mask
        return self.completion_mask * (1 - self.tool_output_mask)

    @property
    def completion_lengths(self) -> torch.Tensor:
        """``(N,)`` completion tokens counted by the mask (EOS included)."""
        return self.completion_mask.sum(-1)

    def select(self, rows: torch.Tensor | slice) -> RolloutBatch:
        """The given rows, with padding columns that every selected row has dropped (a micro-batch)."""
        prompt_mask = self.prompt_mask[rows]  # (b, P)
        completion_mask = self.completion_mask[rows]  # (b, C)
        p_start = _first_nonzero_column(prompt_mask)
        c_end = max(1, int(completion_mask.sum(-1).max().item())) if len(completion_mask) else 1
        index = range(len(self))[rows] if isinstance(rows, slice) else rows.tolist()
        return RolloutBatch(
            prompt_ids=self.prompt_ids[rows][:, p_start:],
            prompt_mask=prompt_mask[:, p_start:],
            completion_ids=self.completion_ids[rows][:, :c_end],
            completion_mask=completion_mask[:, :c_end],
            is_truncated=self.is_truncated[rows],
            prompt_index=self.prompt_index[rows],
            completion_texts=[self.completion_texts[i] for i in index],
            sampling_log_probs=None if self.sampling_log_probs is None else self.sampling_log_probs[rows][:, :c_end],
            tool_output_mask=None if self.tool_output_mask is None else self.tool_output_mask[rows][:, :c_end],
            tool_failed=None if self.tool_failed is None else self.tool_failed[rows],
        )

    @staticmethod
    def concat(batches: Sequence[RolloutBatch], pad_token_id: int) -> RolloutBatch:
        """Join batches from several ``generate`` calls; ``prompt_index`` is offset so it stays unique."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        p = max(b.prompt_ids.shape[1] for b in batches)
        c = max(b.completion_ids.shape[1] for b in batches)
        offsets, total = [], 0
        for b in batches:
            offsets.append(total)
            total += int(b.prompt_index.max().item()) + 1 if len(b) else 0
        return RolloutBatch(
            prompt_ids=torch.cat([_pad_left(b.prompt_ids, p, pad_token_id) for b in batches]),
            prompt_mask=torch.cat([_pad_left(b.prompt_mask, p, 0) for b in batches]),
            completion_ids=torch.cat([_pad_right(b.completion_ids, c, pad_token_id) for b in batches]),
            completion_mask=torch.cat([_pad_right(b.completion_mask, c, 0) for b in batches]),
            is_truncated=torch.cat([b.is_truncated for b in batches]),
            prompt_index=torch.cat([b.prompt_index + off for b, off in zip(batches, offsets, strict=True)]),
            completion_texts=[t for b in batches for t in b.completion_texts],
            sampling_log_probs=(
                torch.cat([_pad_right(b.sampling_log_probs, c, 0) for b in batches])  # type: ignore[arg-type]
                if all(b.sampling_log_probs is not None for b in batches)
                else None
            ),
            tool_output_mask=(
                torch.cat([_pad_right(_tool_mask(b), c, 0) for b in batches])
                if any(b.tool_output_mask is not None for b in batches)
                else None
            ),
            tool_failed=(
                torch.cat([_tool_failed(b) for b in batches])
                if any(b.tool_failed is not None for b in batches)
                else None
            ),
        )


def _tool_mask(b: RolloutBatch) -> torch.Tensor:
    return b.tool_output_mask if b.tool_output_mask is not None else torch.zeros_like(b.completion_mask)


def _tool_failed(b: RolloutBatch) -> torch.Tensor:
    return b.tool_failed if b.tool_failed is not None else torch.zeros_like(b.is_truncated)


def _first_nonzero_column(mask: torch.Tensor) -> int:
    """First column where any row is 1, i.e. how many left-padding columns all rows share."""
    any_real = mask.any(0)  # (P,)
    return int(any_real.to(torch.int64).argmax().item()) if any_real.any() else mask.shape[1]


def _pad_left(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)


def _pad_right(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


class StopCondition(Protocol):
    """Where a continuation stops besides EOS: a tool call's end (:class:`trainer.tools.formats.ToolCallFormat`)."""

    stop_strings: tuple[str, ...]
    """Strings that end a turn where a backend can only stop on strings (vLLM)."""

    def find_call(self, text: str) -> Any:
        """Non-``None`` when ``text`` (one turn's text) ends with a complete call."""
        ...


@dataclass(frozen=True)
class Continuation:
    """One row's new tokens from :meth:`GenerationBackend.continue_rows`.

    Attributes:
        token_ids: the sampled tokens, the EOS included when it ended there.
        ended_with_eos: the last token is an EOS.
        log_probs: the sampler's log-probs of ``token_ids`` (vLLM), or ``None``.
    """

    token_ids: list[int]
    ended_with_eos: bool
    log_probs: list[float] | None = None


class GenerationBackend(Protocol):
    """Samples completions. Implementations:
    :class:`trainer.rollout.transformers_backend.TransformersBackend` and :class:`trainer.rollout.vllm.VLLMBackend`.

    The loop calls :meth:`generate` for every chunk of prompts, :meth:`sleep` once a step's sampling is done, and
    :meth:`sync_weights` after every optimizer step.
    """

    pad_token_id: int
    """The id that pads prompts (on the left) and completions (on the right) in the batches it returns."""
    prompts: PromptEncoder
    """How it renders and tokenises prompts."""
    eos_token_ids: tuple[int, ...]
    """The ids that end a completion."""

    def generate(self, prompts: Sequence[Prompt], num_generations: int, sampling: SamplingParams) -> RolloutBatch:
        """Sample ``num_generations`` completions of each prompt; rows ``i*G .. i*G+G-1`` answer prompt ``i``."""
        ...

    def continue_rows(
        self, prefixes: Sequence[Sequence[int]], sampling: SamplingParams, budgets: Sequence[int], stop: StopCondition
    ) -> list[Continuation]:
        """Sample one continuation of each token prefix (prompt plus what the rollout holds so far), each at most
        ``budgets[i]`` tokens, stopping at EOS or where ``stop`` sees the end of a tool call (the multi-turn loop of
        :mod:`trainer.tools.rollout`)."""
        ...

    def sync_weights(self) -> dict[str, float]:
        """The policy's weights changed (an optimizer step): make the sampler use them; returns metrics."""
        ...

    def sleep(self) -> None:
        """Sampling is done until the next :meth:`sync_weights`: free what the sampler holds, where it can."""
        ...

    def close(self) -> None:
        """The run is over: release the sampler."""
        ...


class PromptEncoder:
    """Prompts to left-padded token ids: the chat template where there is one, then the end of the prompt kept.

    Args:
        tokenizer: its ``pad_token`` (or EOS when it has none) pads.
        max_prompt_length: prompt tokens kept, from the end; ``None`` keeps all.
        apply_chat_template: render prompts with the tokenizer's chat template when it has one; a plain
            string becomes a single user message. Without a template, a string is used as is and chat messages
            are refused.

    Raises:
        ValueError: the tokenizer has neither a pad nor an EOS token.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_prompt_length: int | None = None,
        apply_chat_template: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.use_chat_template = apply_chat_template and getattr(tokenizer, "chat_template", None) is not None
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an EOS token; set tokenizer.pad_token")
        self.pad_token_id: int = int(pad)

    def render(self, prompt: Prompt) -> str:
        """The prompt text the model sees (chat template applied where there is one).

        Raises:
            ValueError: chat messages for a tokenizer without a chat template.
        """
        if self.use_chat_template:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return str(text)
        if isinstance(prompt, str):
            return prompt
        raise ValueError(
            "prompt is a list of chat messages but the tokenizer has no chat_template (or apply_chat_template is "
            "off); give plain-text prompts or a tokenizer with a chat template"
        )

    def token_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids, whole (before ``max_prompt_length`` cuts them)."""
        # A chat template already writes BOS and the like; adding special tokens again would double them.
        return list(self.tokenizer(self.render(prompt), add_special_tokens=not self.use_chat_template)["input_ids"])

    def prompt_length(self, prompt: Prompt) -> int:
        """Tokens of the whole rendered prompt (compare with ``max_prompt_length`` to see what is cut)."""
        return len(self.token_ids(prompt))

    def encode(self, prompts: Sequence[Prompt]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenise and left-pad prompts: ``(ids, mask)``, both ``(len(prompts), P)``.

        Raises:
            ValueError: a prompt that gives no token (the model would have nothing to condition on).
        """
        rows = []
        for i, prompt in enumerate(prompts):
            ids = self.token_ids(prompt)
            if not ids:
                raise ValueError(f"prompt {i} gives no token: {prompt!r:.80}")
            if self.max_prompt_length is not None:
                ids = ids[-self.max_prompt_length :]
            rows.append(ids)
        width = max(len(r) for r in rows)
        ids_t = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids_t[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        return ids_t, mask


def decode_completions(
    tokenizer: PreTrainedTokenizerBase, completion_ids: torch.Tensor, completion_mask: torch.Tensor
) -> list[str]:
    """The text of each ``(N, C)`` completion row up to its mask's end, special tokens (EOS) skipped."""
    return [
        str(tokenizer.decode(row[: int(n)].tolist(), skip_special_tokens=True))
        for row, n in zip(completion_ids, completion_mask.sum(-1), strict=True)
    ]


@dataclass(frozen=True)
class SavedModel:
    """A model directory as :func:`eos_token_ids` reads it (its ``generation_config``), without loading weights.

    Attributes:
        path: a ``save_pretrained`` directory or a hub id.
    """

    path: str

    @property
    def generation_config(self) -> Any:
        try:
            return GenerationConfig.from_pretrained(self.path)
        except OSError:  # no generation_config.json: the model config's EOS
            return GenerationConfig.from_model_config(AutoConfig.from_pretrained(self.path))


def eos_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """EOS ids from the model's generation config (may be several, e.g. Qwen's ``<|im_end|>``) and the tokenizer.

    ``model`` is anything with a ``generation_config`` (a ``PreTrainedModel``).
    """
    ids: list[int] = []
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.append(configured)
    elif configured:
        ids.extend(int(i) for i in configured)
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError("neither the model's generation_config nor the tokenizer defines an EOS token")
    return tuple(dict.fromkeys(ids))


def completion_mask_from_ids(
    completion_ids: torch.Tensor, eos_token_ids: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask of the tokens up to and including the first EOS, and which rows never reached one.

    Args:
        completion_ids: ``(N, C)`` generated tokens (whatever follows EOS is ignored).
        eos_token_ids: the ids that end a completion.

    Returns:
        ``(mask, is_truncated)``: ``(N, C)`` long and ``(N,)`` bool.
    """
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_token_ids), device=completion_ids.device))  # (N, C)
    n, c = completion_ids.shape
    has_eos = is_eos.any(-1)  # (N,)
    first_eos = torch.where(has_eos, is_eos.to(torch.int64).argmax(-1), torch.full((n,), c, device=is_eos.device))
    positions = torch.arange(c, device=completion_ids.device).expand(n, c)  # (N, C)
    mask = (positions <= first_eos.unsqueeze(-1)).to(torch.long)  # (N, C)
    return mask, ~has_eos
