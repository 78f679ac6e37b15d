"""slime's remote reward model against a live server.

slime is not on PyPI and its package needs SGLang and Megatron, so it cannot be installed here. These tests send
exactly what slime sends, read from its source at v0.3.1 (commit 624b824a, ``slime/rollout/rm_hub/__init__.py``):
``remote_rm`` posts ``{"prompt", "response", "label"}`` with aiohttp to ``args.rm_url`` and keeps the JSON answer
as ``sample.reward``, which ``Sample.get_reward_value`` reads with ``args.reward_key``; ``async_rm`` /
``batched_async_rm`` call a ``--custom-rm-path`` function with ``(args, sample)``, or with ``(args, samples)`` of
a whole group under ``--group-rm``, after loading it by its dotted path (``slime.utils.misc.load_function``).
"""

from __future__ import annotations

import asyncio
import importlib
from argparse import Namespace
from dataclasses import dataclass
from typing import Any

import aiohttp
import torch

from tests.integrations.conftest import requests_to

RIGHT = "<think>6*7 = 42</think>\nThe answer is $\\boxed{42}$."
WRONG = "<think>6+7 = 13</think>\nThe answer is $\\boxed{13}$."
# a group of four: right, wrong, right with a placeholder reference (not scoreable), right without format
GROUP = [(RIGHT, "42"), (WRONG, "42"), (RIGHT, "None"), ("The answer is $\\boxed{42}$.", "42")]


@dataclass
class Sample:
    """The fields of slime's ``Sample`` (``slime/utils/types.py``) that its reward path reads or writes."""

    prompt: str | list[dict[str, str]] = ""
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: Any = None
    remove_sample: bool = False

    def get_reward_value(self, args: Namespace) -> float:
        return self.reward if not args.reward_key else self.reward[args.reward_key]


def _group() -> list[Sample]:
    return [Sample(prompt=[{"role": "user", "content": "What is 6*7?"}], response=r, label=t) for r, t in GROUP]


async def _remote_rm(args: Namespace, sample: Sample) -> Any:
    """What slime's ``remote_rm`` sends and returns (its retries left out)."""
    payload = {"prompt": sample.prompt, "response": sample.response, "label": sample.label}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
        session.post(args.rm_url, json=payload) as resp,
    ):
        resp.raise_for_status()
        return await resp.json()


def _group_norm(rewards: list[float]) -> torch.Tensor:
    """slime's ``_post_process_rewards`` for GRPO: needs one finite number per sample."""
    r = torch.tensor(rewards, dtype=torch.float).reshape(-1, len(rewards))
    r = r - r.mean(dim=-1, keepdim=True)
    return r / (r.std(dim=-1, keepdim=True) + 1e-6)


def test_remote_rm_route(live_server: str) -> None:
    args = Namespace(rm_url=f"{live_server}/v1/slime?preset=r1_zero", reward_key="reward")
    group = _group()

    async def rollout() -> None:
        rewards = await asyncio.gather(*(_remote_rm(args, s) for s in group))
        for sample, reward in zip(group, rewards, strict=True):
            sample.reward = reward

    asyncio.run(rollout())
    assert [s.get_reward_value(args) for s in group] == [2.0, 1.0, 0.0, 1.0]
    assert [s.reward["scored"] for s in group] == [True, True, False, True]
    assert group[2].reward["status"] == "invalid_ground_truth"
    assert torch.isfinite(_group_norm([s.get_reward_value(args) for s in group])).all()


def test_custom_rm_scores_a_group_in_one_request(live_server: str, monkeypatch) -> None:
    monkeypatch.setenv("RLVR_PRESET", "r1_zero")
    rm = importlib.import_module("rlvr_client.slime").reward  # slime's load_function("rlvr_client.slime.reward")
    args = Namespace(reward_key=None, group_rm=True)
    group = _group()
    before = requests_to(live_server, "/v1/rewards")
    rewards = asyncio.run(rm(args, group))
    assert requests_to(live_server, "/v1/rewards") - before == 1
    for sample, reward in zip(group, rewards, strict=True):
        sample.reward = reward
    # the unscoreable sample stands at its group's mean (of 2, 1, 1) and is left out of the loss
    assert rewards == [2.0, 1.0, 4 / 3, 1.0]
    assert [s.remove_sample for s in group] == [False, False, True, False]
    advantages = _group_norm(rewards)
    assert torch.isfinite(advantages).all()
    assert abs(float(advantages[0, 2])) < 1e-6  # zero advantage for the stand-in


def test_custom_rm_per_sample_calls_share_one_request(live_server: str, monkeypatch) -> None:
    monkeypatch.setenv("RLVR_PRESET", "r1_zero")
    rm = importlib.import_module("rlvr_client.slime").reward
    args = Namespace(reward_key=None, group_rm=False)
    group = _group()

    async def rollout() -> list[float]:  # slime's generate_and_rm_group: one task per sample, each calls async_rm
        return list(await asyncio.gather(*(rm(args, s) for s in group)))

    before = requests_to(live_server, "/v1/rewards")
    rewards = asyncio.run(rollout())
    assert requests_to(live_server, "/v1/rewards") - before == 1
    assert rewards == [2.0, 1.0, 0.0, 1.0]  # alone, an unscored sample has no group to stand in for
    assert [s.remove_sample for s in group] == [False, False, True, False]
