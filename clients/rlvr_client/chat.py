"""The completion inside a decoded ``prompt + completion`` (OpenRLHF's ``query``), for chat-templated prompts.

OpenRLHF sends ``query = tokenizer.decode(prompt_ids + completion_ids, skip_special_tokens=False)`` with the
(chat-templated) ``prompt`` beside it. The completion is what follows the prompt, less the end-of-turn and
padding tokens that close it. Decoding does not always give the prompt back character for character (a left
truncation of a long prompt, a BOS token the template adds or not, a tokenizer's clean-up of spaces), so when the
query does not start with the prompt the split falls back to the chat template's assistant header: the
completion starts after the header's *n*-th occurrence, where *n* is how often the header occurs in the prompt.
Counting, not searching backwards, keeps a completion that writes the header itself from moving the split.

A template that opens the thinking for the model (DeepSeek-R1 distills, Qwen3 with thinking forced) ends the
prompt with ``<think>``; that tag is given back at the head of the completion, so that the format check sees the
whole ``<think>...</think>`` block the model was scored on, and a completion that opens it again has two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ASSISTANT_HEADERS", "END_TOKENS", "QuerySplitError", "Split", "prompt_text", "split_query"]

#: Assistant headers of the chat templates we know, longest first: Qwen (ChatML), Llama 3, DeepSeek-R1
#: distills (and DeepSeek-V3), Gemma, Mistral's instruction end, Phi-3.
ASSISTANT_HEADERS: tuple[str, ...] = (
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|im_start|>assistant\n",
    "<start_of_turn>model\n",
    "<｜Assistant｜>",
    "<|assistant|>\n",
    "<|assistant|>",
    "[/INST]",
)
#: Tokens that end a turn or pad a sequence, stripped from the end of the completion.
END_TOKENS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
    "<end_of_turn>",
    "<|end|>",
    "</s>",
    "<eos>",
    "<pad>",
    "<|finetune_right_pad_id|>",
)
_BOS_TOKENS = ("<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<bos>", "<s>")
_PREFILLED_THINK = re.compile(r"<think>\s*\Z")


class QuerySplitError(ValueError):
    """The query neither starts with the prompt nor holds the prompt's assistant header."""


@dataclass(frozen=True, slots=True)
class Split:
    """A query cut in two.

    Attributes:
        completion: the model's text, with a prefilled ``<think>`` given back at its head and the closing
            end-of-turn / padding tokens removed.
        think_prefilled: the prompt ended with ``<think>`` (the template opened the thinking).
    """

    completion: str
    think_prefilled: bool


def split_query(query: str, prompt: str) -> Split:
    """Cut ``query`` (prompt + completion, decoded with special tokens) after ``prompt``.

    Raises:
        QuerySplitError: the prompt is not a prefix of the query (even without BOS tokens) and none of
            :data:`ASSISTANT_HEADERS` occurs in both; the message shows the start of each.
    """
    rest = _after_prompt(query, prompt)
    prefill = _PREFILLED_THINK.search(prompt)
    completion = _strip_end_tokens(rest)
    if prefill is not None:
        completion = prefill.group(0) + completion
    return Split(completion=completion, think_prefilled=prefill is not None)


def _after_prompt(query: str, prompt: str) -> str:
    for q, p in ((query, prompt), (_strip_bos(query), _strip_bos(prompt))):
        if q.startswith(p):
            return q[len(p) :]
    for header in ASSISTANT_HEADERS:
        n = prompt.count(header)
        if n == 0:
            continue
        at = -len(header)
        for _ in range(n):
            at = query.find(header, at + len(header))
            if at < 0:
                break
        if at >= 0:
            return query[at + len(header) :].removeprefix(_after_last(prompt, header))
    raise QuerySplitError(
        "the query does not start with the prompt and holds no assistant header of a known chat template; "
        f"query starts {query[:80]!r}, prompt starts {prompt[:80]!r}"
    )


def _after_last(prompt: str, header: str) -> str:
    """What the prompt has after its last assistant header (a prefilled ``<think>``), to skip in the query too."""
    return prompt[prompt.rindex(header) + len(header) :]


def _strip_bos(text: str) -> str:
    for bos in _BOS_TOKENS:
        if text.startswith(bos):
            return text[len(bos) :]
    return text


def _strip_end_tokens(text: str) -> str:
    while True:
        trimmed = text.rstrip()
        for token in END_TOKENS:
            if trimmed.endswith(token):
                text = trimmed[: -len(token)]
                break
        else:
            return text


def prompt_text(prompt: Any) -> str | None:
    """A prompt as text for the language component: a string, or the last user message of chat messages."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        return str(users[-1].get("content", "")) if users else None
    return None
