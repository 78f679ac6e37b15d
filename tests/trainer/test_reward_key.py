"""The trainer's reward API key: sent to the servers, never written out or shown."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from rlvr_client.client import RewardItem
from trainer.config import config_from_dict
from trainer.reward_client import RewardScorer

KEY = "trainer-key-0123456789abcdef"


def test_the_key_stays_out_of_the_saved_config_and_repr() -> None:
    config = config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl", "reward_api_key": KEY})
    assert config.reward_api_key == KEY
    saved = yaml.safe_dump(config.to_dict())
    assert KEY not in saved and yaml.safe_load(saved)["reward_api_key"] is None
    assert KEY not in repr(config) and "reward_api_key=<redacted>" in repr(config)


def test_the_scorer_sends_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        items = json.loads(request.content)["items"]
        return httpx.Response(200, json={"results": [{"id": i["id"], "reward": 1.0, "status": "ok"} for i in items]})

    item = RewardItem(id="a", task="math", response="4", ground_truth="4")
    with RewardScorer(
        "http://rlvr", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), api_key=KEY
    ) as s:
        assert s.score([item])[0].reward == 1.0
    monkeypatch.setenv("RLVR_API_KEY", "from-the-environment-0123")  # the default
    with RewardScorer("http://rlvr", client=httpx.AsyncClient(transport=httpx.MockTransport(handler))) as s:
        assert s.score([item])[0].reward == 1.0
    assert seen == [f"Bearer {KEY}", "Bearer from-the-environment-0123"]
