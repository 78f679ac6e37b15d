"""The adapters' own logic, without the frameworks: API keys and RLVR_SERVER_URL, TRL's per-component values,
the coalescing of per-sample calls, verl's sample mapping and slime's stand-in for an unscored sample.
The frameworks' own code paths run in tests/integrations (their own virtual environment)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from rlvr_client import _batching
from rlvr_client.client import (
    AsyncRewardClient,
    ComponentResult,
    RewardClient,
    RewardItem,
    RewardResult,
    client_from_env,
    server_urls_from_env,
)
from rlvr_client.protocol.slime import group_rewards as _group_rewards
from rlvr_client.protocol.slime import sample_item as _item
from rlvr_client.protocol.verl import as_verl as _as_verl
from rlvr_client.trl import component_score, reward_function, reward_functions
from rlvr_client.verl import item_for_sample


def _answer(request: httpx.Request, seen: list[dict[str, Any]]) -> httpx.Response:
    body = json.loads(request.content)
    seen.append({"headers": dict(request.headers), "body": body})
    results = []
    for item in body["items"]:
        right = item["response"].endswith(str(item.get("ground_truth")))
        unscored = item.get("ground_truth") == "None"
        results.append(
            {
                "id": item["id"],
                "reward": None if unscored else float(right) + 0.5,
                "status": "invalid_ground_truth" if unscored else "ok",
                "components": {
                    "accuracy": {
                        "score": None if unscored else float(right),
                        "weight": 1.0,
                        "status": "invalid_ground_truth" if unscored else "ok",
                    },
                    "format": {"score": 0.5, "weight": 1.0, "status": "ok"},
                },
            }
        )
    return httpx.Response(200, json={"results": results})


def test_api_key_is_sent_as_a_bearer_token() -> None:
    seen: list[dict[str, Any]] = []
    transport = httpx.MockTransport(lambda r: _answer(r, seen))
    client = RewardClient("http://rm", client=httpx.Client(transport=transport), api_key="k-123")
    client.score([RewardItem(id="a", task="math", response="42", ground_truth="42")])
    assert seen[0]["headers"]["authorization"] == "Bearer k-123"
    with pytest.raises(ValueError, match="api_key"):
        RewardClient("http://rm", api_key="two words")


def test_urls_and_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_SERVER_URL", " http://a:8000, http://b:8000/ ,")
    monkeypatch.setenv("RLVR_API_KEY", "secret")
    assert server_urls_from_env() == ["http://a:8000", "http://b:8000/"]
    client = client_from_env()
    assert client.base_urls == ["http://a:8000", "http://b:8000"]
    assert client._headers == {"Authorization": "Bearer secret"}
    monkeypatch.delenv("RLVR_SERVER_URL")
    with pytest.raises(ValueError, match="RLVR_SERVER_URL"):
        server_urls_from_env()


def _result(reward: float | None, **components: tuple[float | None, float]) -> RewardResult:
    return RewardResult(
        id="x",
        reward=reward,
        status="ok" if reward is not None else "timeout",
        components={n: ComponentResult(score=s, weight=w, status="ok") for n, (s, w) in components.items()},
    )


@pytest.mark.parametrize(
    ("result", "name", "value", "reason"),
    [
        (_result(1.5, accuracy=(1.0, 1.0), format=(0.5, 1.0)), "format", 0.5, "a scored component"),
        (_result(None, accuracy=(None, 1.0), format=(1.0, 1.0)), "format", None, "unscoreable item: None for all"),
        (_result(2.0, accuracy=(1.0, 1.0), language=(None, 1.0)), "language", 1.0, "abstained, counted as 1.0"),
        (_result(1.0, accuracy=(1.0, 1.0), language=(None, 0.0)), "language", None, "weight 0, not scored"),
        (_result(1.0, accuracy=(1.0, 1.0)), "format", None, "a component the item does not have"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_component_score(result: RewardResult, name: str, value: float | None, reason: str) -> None:
    assert component_score(result, name) == value


def test_per_component_functions_share_one_request_and_score_at_unit_weight() -> None:
    seen: list[dict[str, Any]] = []
    client = RewardClient("http://rm", client=httpx.Client(transport=httpx.MockTransport(lambda r: _answer(r, seen))))
    accuracy, fmt = reward_functions(client, components={"accuracy": 2.0, "format": {"weight": 3, "mode": "soft"}})
    completions = ["so 42", "so 13", "so 7"]
    columns = {"ground_truth": ["42", "42", "None"]}
    assert accuracy(completions, **columns) == [1.0, 0.0, None]
    assert fmt(completions, **columns) == [0.5, 0.5, None]  # the unscoreable item is None for every function
    assert len(seen) == 1
    assert seen[0]["body"]["components"] == {"accuracy": 1.0, "format": {"weight": 1.0, "mode": "soft"}}
    assert (accuracy.__name__, fmt.__name__) == ("rlvr_accuracy", "rlvr_format")


def test_concurrent_per_sample_calls_go_out_as_one_request() -> None:
    seen: list[dict[str, Any]] = []

    async def main() -> list[RewardResult]:
        transport = httpx.MockTransport(lambda r: _answer(r, seen))
        client = AsyncRewardClient("http://rm", client=httpx.AsyncClient(transport=transport))
        coalescer = _batching.Coalescer(client, preset="r1_zero")

        async def one(i: int) -> RewardResult:
            await asyncio.sleep(0.001 * (i % 3))  # arrivals spread like verl's decodes in its thread pool
            return await coalescer.score(RewardItem(id=f"s{i}", task="math", response=f"{i}", ground_truth="4"))

        return list(await asyncio.gather(*(one(i) for i in range(24))))

    results = asyncio.run(main())
    assert len(seen) == 1 and len(seen[0]["body"]["items"]) == 24
    assert seen[0]["body"]["preset"] == "r1_zero"
    assert [r.id for r in results] == [f"s{i}" for i in range(24)]
    assert [r.reward for r in results][3:6] == [0.5, 1.5, 0.5]


@pytest.mark.parametrize(
    ("source", "truth", "extra", "expected", "reason"),
    [
        (
            "openai/gsm8k",
            "72",
            {"split": "train", "question": "How many?"},
            {"task": "math", "ground_truth": "72", "prompt": "How many?"},
            "GSM8K: math, verl's question as the prompt",
        ),
        ("lighteval/MATH", "\\frac{1}{2}", None, {"task": "math", "ground_truth": "\\frac{1}{2}"}, "MATH"),
        (
            "deepmind/code_contests",
            json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
            {},
            {"task": "code", "tests": {"type": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}]}},
            "verl's code ground truth as stdio tests",
        ),
        (
            "apps",
            {"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"},
            {},
            {"task": "code", "tests": {"type": "call", "fn_name": "add", "cases": [{"input": [1, 2], "output": 3}]}},
            "call-based",
        ),
        (
            "mine",
            "42",
            {"truncated": True},
            {"task": "math", "ground_truth": "42", "truncated": True},
            "a truncated flag that a custom reward manager put in extra_info",
        ),
        (
            "mine",
            "42",
            {"task": "math", "language": "fr", "index": 3},
            {"task": "math", "ground_truth": "42", "language": "fr"},
            "extra_info fields; verl's own keys are left out",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_verl_sample_to_item(source: str, truth: Any, extra: Any, expected: dict[str, Any], reason: str) -> None:
    item = item_for_sample(source, "the answer", truth, extra, item_id="i").to_json()
    assert item == {"id": "i", "response": "the answer", **expected}


def test_verl_result_keeps_the_status_and_gives_an_unscored_sample_zero() -> None:
    scored = _as_verl(_result(1.5, accuracy=(1.0, 1.0), format=(0.5, 1.0)), "zero")
    assert scored == {
        "score": 1.5,
        "acc": 1.0,
        "rlvr_scored": 1.0,
        "rlvr_status": "ok",
        "rlvr_accuracy": 1.0,
        "rlvr_format": 0.5,
    }
    unscored = _as_verl(_result(None, accuracy=(None, 1.0), format=(0.5, 1.0)), "zero")
    assert unscored == {
        "score": 0.0,
        "acc": None,
        "rlvr_scored": 0.0,
        "rlvr_status": "timeout",
        "rlvr_accuracy": None,
        "rlvr_format": 0.5,
    }
    assert unscored.keys() == scored.keys()  # verl takes every sample's keys from the first
    with pytest.raises(ValueError, match="status 'timeout'"):
        _as_verl(_result(None, accuracy=(None, 1.0)), "raise")


@dataclass
class _Sample:  # the fields of slime's Sample (slime/utils/types.py) that the custom RM touches
    prompt: str = ""
    response: str = ""
    label: str | None = None
    response_length: int = 0
    remove_sample: bool = False


def test_slime_unscored_sample_is_removed_and_keeps_its_group_mean() -> None:
    group = [_Sample() for _ in range(4)]
    results = [_result(2.0), _result(None), _result(0.0), _result(1.0)]
    rewards = _group_rewards(group, results)
    assert rewards == [2.0, 1.0, 0.0, 1.0]  # the stand-in is the mean of the scored three
    assert sum(rewards) / 4 == (2.0 + 0.0 + 1.0) / 3
    assert [s.remove_sample for s in group] == [False, True, False, False]
    alone = [_Sample()]
    assert _group_rewards(alone, [_result(None)]) == [0.0] and alone[0].remove_sample


def test_trl_sends_truncated_for_completions_that_reach_max_completion_length() -> None:
    """``completion_ids`` of length ``max_completion_length`` (4 here) mean cut at the limit; a ``truncated``
    column overrides; without ``max_completion_length`` nothing is sent (issue 23)."""
    seen: list[dict[str, Any]] = []
    client = RewardClient("http://rm", client=httpx.Client(transport=httpx.MockTransport(lambda r: _answer(r, seen))))
    columns = {"ground_truth": ["42"] * 3, "completion_ids": [[1, 2, 3, 4], [1, 2, 3], [1, 2, 3, 4, 5]]}
    reward_function(client, max_completion_length=4)(["so 42", "so 42", "so 42"], **columns)
    assert [it.get("truncated", False) for it in seen[-1]["body"]["items"]] == [True, False, True]
    reward_function(client, max_completion_length=4)(
        ["so 42"], ground_truth=["42"], completion_ids=[[1, 2, 3, 4]], truncated=[False]
    )
    assert "truncated" not in seen[-1]["body"]["items"][0]
    reward_function(client)(["so 42"], ground_truth=["42"], completion_ids=[[1, 2, 3, 4]])
    assert "truncated" not in seen[-1]["body"]["items"][0]


class _Status:  # slime's Sample.Status members carry their name as a lower-case value
    def __init__(self, value: str) -> None:
        self.value = value


def test_slime_truncated_status_is_sent() -> None:
    cut = _Sample(response="4^2 = 16 and", label="16", response_length=8)
    cut.status = _Status("truncated")  # type: ignore[attr-defined]
    done = _Sample(response="16", label="16", response_length=2)
    done.status = _Status("completed")  # type: ignore[attr-defined]
    assert _item(cut, "a").to_json()["truncated"] is True
    assert "truncated" not in _item(done, "b").to_json()
    assert "truncated" not in _item(_Sample(response="16", label="16"), "c").to_json()  # no status: not sent
