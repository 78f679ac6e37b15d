"""The trainer's reward requests retry within ``reward_retry_deadline_s``, not a count of attempts."""

from __future__ import annotations

import json

import httpx
import pytest

from rlvr_client.client import RewardItem, RewardServerError
from trainer.config import config_from_dict
from trainer.reward_client import RewardScorer

ITEM = RewardItem(id="a", task="math", response="4", ground_truth="4")


class Refusing:
    """Answers ``refusals`` 429s (Retry-After: 7) and then 200s."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.refusals:
            return httpx.Response(429, headers={"Retry-After": "7"}, json={"detail": "full"})
        items = json.loads(request.content)["items"]
        return httpx.Response(200, json={"results": [{"id": i["id"], "reward": 1.0, "status": "ok"} for i in items]})


def _scorer(server: Refusing, deadline_s: float) -> tuple[RewardScorer, list[float]]:
    transport = httpx.AsyncClient(transport=httpx.MockTransport(server))
    scorer = RewardScorer("http://rlvr", client=transport, retry_deadline_s=deadline_s, api_key="k")
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # a fake clock that moves only when the client waits
        if seconds > 0:
            slept.append(seconds)
        now[0] += seconds

    assert (scorer._client.retry.deadline_s, scorer._client.retry.max_retries) == (deadline_s, None)
    scorer._client._clock = lambda: now[0]
    scorer._client._sleep = sleep
    scorer._client.retry = type(scorer._client.retry)(deadline_s=deadline_s, jitter=0.0)  # no jitter: exact waits
    return scorer, slept


def test_ten_refusals_are_waited_out_inside_the_deadline() -> None:
    server = Refusing(10)
    scorer, slept = _scorer(server, deadline_s=100)
    with scorer:
        assert [r.reward for r in scorer.score([ITEM])] == [1.0]
    assert slept == [7.0] * 10 and server.calls == 11


def test_past_the_deadline_the_batch_fails_naming_it() -> None:
    server = Refusing(100)
    scorer, slept = _scorer(server, deadline_s=30)
    with scorer, pytest.raises(RewardServerError, match=r"past the retry deadline of 30 s"):
        scorer.score([ITEM])
    assert slept == [7.0] * 4  # at 28 s, 2 s left: the server's 7 s do not fit


def test_the_config_sets_the_deadline_and_no_attempt_count_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl"})
    assert (config.reward_retry_deadline_s, config.reward_max_retries) == (300.0, None)
    config = config_from_dict(
        {"model_name_or_path": "m", "train_data": "d.jsonl", "reward_retry_deadline_s": 42, "reward_max_retries": 3}
    )
    assert (config.reward_retry_deadline_s, config.reward_max_retries) == (42, 3)
    monkeypatch.setattr(RewardScorer, "wait_ready", lambda self, timeout_s: [])
    with RewardScorer.from_config(config) as scorer:
        assert (scorer._client.retry.deadline_s, scorer._client.retry.max_retries) == (42, 3)
    with pytest.raises(ValueError, match="reward_retry_deadline_s"):
        config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl", "reward_retry_deadline_s": -1})
