"""OpenRLHF 0.11.2's own remote-reward client (``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor``) against a
live server: ``--reward.remote_url`` as our route, and as the path of ``rlvr_client/openrlhf.py``.

The rollout is OpenRLHF's: it tokenizes the chat-templated prompt, takes the engine's tokens (a stand-in for
vLLM that returns a fixed completion), decodes prompt + completion with special tokens into ``query`` and posts
it. The chat templates are those of Qwen2.5, Llama 3.1 and DeepSeek-R1 distills (which prefill ``<think>``), on a
tokenizer built here.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from openrlhf.utils.agent import SingleTurnAgentExecutor

import rlvr_client.openrlhf
from tests.integrations.conftest import requests_to
from trainer.tiny import build_tokenizer

QWEN = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA = (
    "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
R1_DISTILL = (
    "<｜begin▁of▁sentence｜>{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"
)
SPECIAL = [
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<｜begin▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜end▁of▁sentence｜>",
    "<think>",
    "</think>",
]
QUESTION = "What is 6*7?"
RIGHT = "<think>\n6*7 = 42\n</think>\nThe answer is $\\boxed{42}$."
WRONG = "<think>\n6+7 = 13\n</think>\nThe answer is $\\boxed{13}$."
END = {"qwen": "<|im_end|>", "llama": "<|eot_id|>", "r1": "<｜end▁of▁sentence｜>"}


def _tokenizer(template: str):
    corpus = [QUESTION, RIGHT, WRONG, "user assistant system"] * 20
    return build_tokenizer(corpus, vocab_size=300, extra_tokens=SPECIAL, chat_template=template)


class _Engine:
    """Stands in for OpenRLHF's vLLM engine: answers every prompt with ``completion`` (its tokens)."""

    def __init__(self, tokenizer, completion: str) -> None:
        self.ids = tokenizer.encode(completion, add_special_tokens=False)

    async def generate(self, prompt_token_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        out = SimpleNamespace(token_ids=self.ids, finish_reason="stop", logprobs=None, text="")
        return SimpleNamespace(outputs=[out])


def _rollout(executor: SingleTurnAgentExecutor, template: str, completion: str, label: Any) -> dict[str, Any]:
    tokenizer = _tokenizer(template)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True
    )
    params = SimpleNamespace(max_tokens=128, logprobs=None)
    return asyncio.run(executor.execute(prompt, label, params, 512, tokenizer, _Engine(tokenizer, completion)))


@pytest.mark.parametrize(
    ("template", "completion", "reward"),
    [
        (QWEN, RIGHT + END["qwen"], 2.0),
        (QWEN, WRONG + END["qwen"], 1.0),
        (LLAMA, RIGHT + END["llama"], 2.0),
        # the template opened <think>: the model writes only the rest, and the format check still holds
        (R1_DISTILL, RIGHT.removeprefix("<think>\n") + END["r1"], 2.0),
        # ... and a model that opens it again breaks the format (two <think>)
        (R1_DISTILL, RIGHT + END["r1"], 1.0),
    ],
    ids=["qwen right", "qwen wrong", "llama right", "r1 prefilled think", "r1 think opened twice"],
)
def test_rollout_through_the_route(live_server: str, template: str, completion: str, reward: float) -> None:
    executor = SingleTurnAgentExecutor(remote_rm_url=[f"{live_server}/v1/openrlhf?preset=r1_zero"])
    out = _rollout(executor, template, completion, "42")
    assert out["reward"] == [reward], out  # OpenRLHF logs and swallows a failed fetch: reward stays None
    assert out["scores"] == [reward]
    assert out["extra_logs"]["rlvr/unscored"] == [0.0]
    # what OpenRLHF's samples generator then does with them
    assert torch.tensor([out["reward"]]).shape == (1, 1)
    assert {k: torch.tensor([v]).shape for k, v in out["extra_logs"].items()}["rlvr/format"] == (1, 1)


def test_openrlhf_batch_with_an_unscoreable_query(live_server: str) -> None:
    tokenizer = _tokenizer(QWEN)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True
    )
    queries = [prompt + c + END["qwen"] for c in (RIGHT, WRONG, RIGHT, RIGHT)]
    tests = {"type": "stdio", "cases": [{"input": "1\n", "output": "1\n"}]}
    labels = ["42", "42", "None", json.dumps({"tests": tests})]  # a placeholder reference; a code item without code
    executor = SingleTurnAgentExecutor(remote_rm_url=[f"{live_server}/v1/openrlhf?preset=r1_zero"])
    before = requests_to(live_server, "/v1/openrlhf")
    [answer] = asyncio.run(executor._fetch_rewards_via_http(queries, [prompt] * 4, labels))
    assert requests_to(live_server, "/v1/openrlhf") - before == 1
    assert answer["rewards"] == [2.0, 1.0, 0.0, 1.0]  # no program: accuracy 0 (a verdict), format 1
    assert answer["extra_logs"]["rlvr/unscored"] == [0.0, 0.0, 1.0, 0.0]


def test_reward_func_file_calls_the_server_with_the_key(live_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_PRESET", "r1_zero")
    monkeypatch.setenv("RLVR_API_KEY", "test-key")
    executor = SingleTurnAgentExecutor(remote_rm_url=[rlvr_client.openrlhf.__file__])
    assert executor.reward_func is not None  # OpenRLHF loaded reward_func from the file
    before = requests_to(live_server, "/v1/rewards")
    out = _rollout(executor, QWEN, RIGHT + END["qwen"], "42")
    assert out["reward"] == [2.0], out
    assert requests_to(live_server, "/v1/rewards") - before == 1
    out = _rollout(executor, QWEN, RIGHT + END["qwen"], "N/A")
    assert out["reward"] == [0.0] and out["extra_logs"]["rlvr/unscored"] == [1.0]
