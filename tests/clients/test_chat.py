"""Cutting the completion out of OpenRLHF's ``query`` for the chat templates trainers use.

The prompts are what each model's chat template renders with ``add_generation_prompt=True`` (written out here
from the templates of Qwen2.5-Instruct, Llama-3.1-Instruct and DeepSeek-R1-Distill-Qwen, the last of which opens
the thinking in the prompt); the queries are prompt + completion as OpenRLHF decodes them, special tokens kept.
"""

from __future__ import annotations

import pytest

from rlvr_client.chat import QuerySplitError, split_query

QWEN = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"
)
LLAMA = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 6*7?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
R1_DISTILL = "<｜begin▁of▁sentence｜><｜User｜>What is 6*7?<｜Assistant｜><think>\n"
R1_DISTILL_OLD = "<｜begin▁of▁sentence｜><｜User｜>What is 6*7?<｜Assistant｜>"
ANSWER = "<think>\n6*7 = 42\n</think>\nThe answer is $\\boxed{42}$."

CASES = [
    # (prompt, query, completion, think_prefilled, reason)
    (QWEN, QWEN + ANSWER + "<|im_end|>", ANSWER, False, "ChatML: the prompt is a prefix; <|im_end|> is cut"),
    (QWEN, QWEN + ANSWER + "<|im_end|>\n<|endoftext|><|endoftext|>", ANSWER, False, "end of turn, then padding"),
    (LLAMA, LLAMA + ANSWER + "<|eot_id|>", ANSWER, False, "Llama 3: header ends in two newlines; <|eot_id|> cut"),
    (
        R1_DISTILL,
        R1_DISTILL + "6*7 = 42\n</think>\nThe answer is $\\boxed{42}$.<｜end▁of▁sentence｜>",
        "<think>\n6*7 = 42\n</think>\nThe answer is $\\boxed{42}$.",
        True,
        "R1 distill: the template opened <think>; it is given back at the head of the completion",
    ),
    (
        R1_DISTILL_OLD,
        R1_DISTILL_OLD + ANSWER + "<｜end▁of▁sentence｜>",
        ANSWER,
        False,
        "older R1 distill template: the model opens <think> itself",
    ),
    (
        LLAMA,
        LLAMA.removeprefix("<|begin_of_text|>") + ANSWER + "<|eot_id|>",
        ANSWER,
        False,
        "the prompt has a BOS the decoded query lacks",
    ),
    (
        QWEN,
        QWEN[40:] + ANSWER + "<|im_end|>",
        ANSWER,
        False,
        "a long prompt cut on the left by OpenRLHF: found by the assistant header",
    ),
    (
        QWEN.replace("6*7?", "6 * 7 ?"),
        QWEN + ANSWER + "<|im_end|>",
        ANSWER,
        False,
        "decoding changed the prompt's spaces: found by the assistant header",
    ),
    (
        QWEN.replace("6*7?", "6 * 7 ?"),
        QWEN + "I am <|im_start|>assistant\nhere: 42<|im_end|>",
        "I am <|im_start|>assistant\nhere: 42",
        False,
        "a completion that writes the header itself does not move the split (the prompt has one header)",
    ),
    (QWEN, QWEN + "<|im_end|>", "", False, "an empty completion"),
]


@pytest.mark.parametrize(("prompt", "query", "completion", "prefilled", "reason"), CASES, ids=[c[4] for c in CASES])
def test_split_query(prompt: str, query: str, completion: str, prefilled: bool, reason: str) -> None:
    split = split_query(query, prompt)
    assert split.completion == completion
    assert split.think_prefilled is prefilled


def test_a_query_without_its_prompt_or_a_known_header_is_an_error() -> None:
    with pytest.raises(QuerySplitError, match="does not start with the prompt"):
        split_query("User: what is 6*7?\nAssistant: 42", "User: what is 6 * 7?\nAssistant:")
