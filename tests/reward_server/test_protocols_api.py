"""The trainers' own protocols, in process: OpenRLHF's ``/v1/openrlhf`` and slime's ``/v1/slime``."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.settings import Settings

QWEN_PROMPT = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"
R1_PROMPT = "<｜begin▁of▁sentence｜><｜User｜>What is 6*7?<｜Assistant｜><think>\n"
RIGHT = "<think>\n6*7 = 42\n</think>\nThe answer is $\\boxed{42}$."
WRONG = "<think>\n6+7 = 13\n</think>\nThe answer is $\\boxed{13}$."


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(math_workers=1, math_timeout_s=2.0, max_batch_items=8))) as c:
        yield c


def test_openrlhf_scores_each_query_and_flags_the_unscoreable_one(client: TestClient) -> None:
    body = {
        "query": [
            QWEN_PROMPT + RIGHT + "<|im_end|>",
            QWEN_PROMPT + WRONG + "<|im_end|><|endoftext|>",
            # the template opened <think>; the completion closes it once: format holds
            R1_PROMPT + "6*7 = 42\n</think>\nThe answer is $\\boxed{42}$.<｜end▁of▁sentence｜>",
            QWEN_PROMPT + RIGHT + "<|im_end|>",  # its reference is a placeholder: not scoreable
        ],
        "prompts": [QWEN_PROMPT, QWEN_PROMPT, R1_PROMPT, QWEN_PROMPT],
        "labels": ["42", "42", "42", "None"],
    }
    answer = client.post("/v1/openrlhf?preset=r1_zero", json=body)
    assert answer.status_code == 200, answer.text
    out = answer.json()
    # r1_zero = accuracy + format, weight 1 each; the unscoreable query gets 0.0 and rlvr/unscored = 1
    assert out["rewards"] == [2.0, 1.0, 2.0, 0.0]
    assert out["scores"] == out["rewards"]
    assert out["extra_logs"]["rlvr/unscored"] == [0.0, 0.0, 0.0, 1.0]
    assert out["extra_logs"]["rlvr/accuracy"] == [1.0, 0.0, 1.0, 0.0]
    assert out["extra_logs"]["rlvr/format"] == [1.0, 1.0, 1.0, 1.0]


def test_openrlhf_reads_code_labels(client: TestClient) -> None:
    tests = {"type": "stdio", "cases": [{"input": "3 4\n", "output": "7\n"}, {"input": "1 1\n", "output": "2\n"}]}
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    body = {
        "query": [QWEN_PROMPT + program + "<|im_end|>"],
        "prompts": [QWEN_PROMPT],
        "labels": [json.dumps({"tests": tests})],
    }
    out = client.post("/v1/openrlhf", json=body).json()
    assert out["rewards"] == [1.0]


@pytest.mark.parametrize(
    ("body", "query", "loc"),
    [
        ({"query": ["a"], "prompts": [], "labels": []}, "", ["body", "query"]),
        ({"query": ["x: 1"], "prompts": ["y:"], "labels": ["1"]}, "", ["body", "query", 0]),
        (
            {"query": [QWEN_PROMPT], "prompts": [QWEN_PROMPT], "labels": ['{"answer": 1}']},
            "",
            ["body", "labels", 0, "answer"],
        ),
        (
            {"query": [QWEN_PROMPT], "prompts": [QWEN_PROMPT], "labels": ['{"tests": {"type": "nope"}}']},
            "",
            ["body", "labels", 0, "tests"],
        ),
        ({"query": [QWEN_PROMPT], "prompts": [QWEN_PROMPT], "labels": ["1"]}, "?preset=r9", ["query", "preset"]),
        ({"query": [QWEN_PROMPT], "prompts": [QWEN_PROMPT], "labels": ["1"]}, "?components={", ["query", "components"]),
    ],
    ids=[
        "lists of different lengths",
        "query without its prompt",
        "unknown label key",
        "bad tests",
        "bad preset",
        "components not JSON",
    ],
)
def test_openrlhf_errors_name_the_field_it_sent(client: TestClient, body: dict, query: str, loc: list) -> None:
    answer = client.post("/v1/openrlhf" + query, json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"][: len(loc)] == loc


def test_slime_answers_a_dict_with_the_reward_and_its_status(client: TestClient) -> None:
    ok = client.post("/v1/slime?preset=r1_zero", json={"prompt": "What is 6*7?", "response": RIGHT, "label": "42"})
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"reward": 2.0, "scored": True, "status": "ok", "components": {"accuracy": 1.0, "format": 1.0}}
    null = client.post(
        "/v1/slime", json={"prompt": [{"role": "user", "content": "6*7?"}], "response": RIGHT, "label": "N/A"}
    )
    assert null.json() == {
        "reward": 0.0,
        "scored": False,
        "status": "invalid_ground_truth",
        "components": {"accuracy": None},
    }


@pytest.mark.parametrize("prompt", [5, [1], {"role": "user"}])
def test_a_slime_prompt_of_the_wrong_type_is_one_error(client: TestClient, prompt: object) -> None:
    answer = client.post("/v1/slime", json={"prompt": prompt, "response": RIGHT, "label": "42"})
    assert answer.status_code == 422
    assert [(e["loc"], e["msg"]) for e in answer.json()["detail"]] == [
        (["body", "prompt"], "Input should be a string or a list of chat messages (objects)")
    ]


def test_slime_label_errors_name_the_key(client: TestClient) -> None:
    answer = client.post("/v1/slime", json={"response": RIGHT, "label": {"truth": "42"}})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "label", "truth"]


def test_a_protocol_route_reads_its_request_once(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # The items validate straight from the protocol's dataclasses and the results reach the translator as
    # dataclasses: neither goes through JSON to be read again.
    from rlvr_client import protocol

    def round_trip(*args: object, **kwargs: object) -> None:
        raise AssertionError("a protocol route serialised an item or a result to read it again")

    monkeypatch.setattr(protocol.RewardItem, "to_json", round_trip)
    monkeypatch.setattr(protocol.RewardResult, "from_json", classmethod(round_trip))
    body = {"query": [QWEN_PROMPT + RIGHT + "<|im_end|>"], "prompts": [QWEN_PROMPT], "labels": ["42"]}
    assert client.post("/v1/openrlhf", json=body).json()["rewards"] == [1.0]
    assert client.post("/v1/slime", json={"response": RIGHT, "label": "42"}).json()["reward"] == 1.0
