"""verl 0.9.1's own reward managers, on CPU, on a small ``DataProto`` built here, against a live server.

Three paths, each with a sample the server cannot score (its reference is the placeholder ``None``):
verl's reward loop (``RewardLoopWorker``, verl >= 0.7's default) with :func:`rlvr_client.verl.compute_score_async`;
its legacy ``BatchRewardManager`` with ``compute_score_batch``; its legacy ``NaiveRewardManager`` with the
per-sample ``compute_score``. verl loads our function itself, from ``custom_reward_function``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager as LoopNaive
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.workers.reward_manager import BatchRewardManager, NaiveRewardManager

from tests.integrations.conftest import requests_to
from trainer.tiny import build_tokenizer

PROMPT = "What is 6*7? Think, then answer."
RIGHT = "<think>6*7 = 42</think>\nThe answer is $\\boxed{42}$."
WRONG = "<think>6+7 = 13</think>\nThe answer is $\\boxed{13}$."
NO_FORMAT = "The answer is $\\boxed{42}$."
PROGRAM = "<think>add</think>\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
# (data_source, response, ground_truth, expected score with r1_zero = accuracy + format, expected rlvr_scored)
SAMPLES = [
    ("openai/gsm8k", RIGHT, "42", 2.0, 1.0),
    ("openai/gsm8k", WRONG, "42", 1.0, 1.0),
    ("lighteval/MATH", NO_FORMAT, "42", 1.0, 1.0),
    ("openai/gsm8k", RIGHT, "None", 0.0, 0.0),  # invalid_ground_truth: no reward, verl gets 0.0
    ("codecontests", PROGRAM, json.dumps({"inputs": ["3 4\n", "1 1\n"], "outputs": ["7\n", "2\n"]}), 2.0, 1.0),
]


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [PROMPT, RIGHT, WRONG, NO_FORMAT, PROGRAM] * 20
    return build_tokenizer(corpus, vocab_size=300, extra_tokens=["<think>", "</think>"])


def _batch(tokenizer) -> DataProto:
    """verl's layout: prompts left-padded, responses right-padded, one attention mask over both."""
    pad = tokenizer.pad_token_id
    prompts = [tokenizer.encode(PROMPT + f" ({i})") for i in range(len(SAMPLES))]
    responses = [[*tokenizer.encode(r), tokenizer.eos_token_id] for _, r, _, _, _ in SAMPLES]
    p_len, r_len = max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (r_len - len(r)) for r in responses])
    mask = torch.tensor(
        [
            [0] * (p_len - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (r_len - len(r))
            for p, r in zip(prompts, responses, strict=True)
        ]
    )
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": np.array([s for s, *_ in SAMPLES], dtype=object),
            "reward_model": np.array([{"ground_truth": t, "style": "rule"} for _, _, t, _, _ in SAMPLES], dtype=object),
            "extra_info": np.array([{"index": i, "split": "train"} for i in range(len(SAMPLES))], dtype=object),
        },
    )


def _last_token_rewards(reward_tensor: torch.Tensor, data: DataProto) -> list[float]:
    """verl puts each sample's reward on its last response token."""
    p_len = data.batch["prompts"].shape[-1]
    lengths = data.batch["attention_mask"][:, p_len:].sum(-1)
    assert float(reward_tensor.sum()) == pytest.approx(
        sum(float(reward_tensor[i, n - 1]) for i, n in enumerate(lengths))
    )
    return [float(reward_tensor[i, n - 1]) for i, n in enumerate(lengths)]


def _config(name: str, tokenizer_path: str | None = None):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": tokenizer_path, "tokenizer_path": tokenizer_path}},
            "reward": {
                "num_workers": 1,
                "custom_reward_function": {
                    "path": "pkg://rlvr_client.verl",
                    "name": name,
                    "reward_kwargs": {"preset": "r1_zero"},
                },
                "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": "x"}},
                "reward_model": {"enable": False},
                "sandbox_fusion": None,
            },
        }
    )


EXPECTED = [score for *_, score, _ in SAMPLES]
SCORED = [scored for *_, scored in SAMPLES]


def test_reward_loop_sends_the_batch_in_one_request(live_server: str, tokenizer, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    worker = RewardLoopWorker(_config("compute_score_async", str(tmp_path)))
    assert isinstance(worker.reward_manager, LoopNaive)
    data = _batch(tokenizer)
    before = requests_to(live_server, "/v1/rewards")
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    assert requests_to(live_server, "/v1/rewards") - before == 1
    scores = [o["reward_score"] for o in outputs]
    assert scores == EXPECTED
    infos = [o["reward_extra_info"] for o in outputs]
    assert all(info.keys() == infos[0].keys() for info in infos)  # verl reads every sample's keys from the first
    assert [info["rlvr_scored"] for info in infos] == SCORED
    assert infos[3]["rlvr_status"] == "invalid_ground_truth" and infos[3]["acc"] is None
    assert [info["acc"] for info in infos] == [1.0, 0.0, 1.0, None, 1.0]
    rm_scores = LoopNaive.assemble_rm_scores(data, scores)
    assert _last_token_rewards(rm_scores, data) == EXPECTED


def test_batch_reward_manager_sends_the_batch_in_one_request(live_server: str, tokenizer) -> None:
    compute_score = get_custom_reward_fn(_config("compute_score_batch"))
    manager = BatchRewardManager(tokenizer, num_examine=0, compute_score=compute_score)
    data = _batch(tokenizer)
    before = requests_to(live_server, "/v1/rewards")
    out = manager(data, return_dict=True)
    assert requests_to(live_server, "/v1/rewards") - before == 1
    assert _last_token_rewards(out["reward_tensor"], data) == EXPECTED
    assert out["reward_extra_info"]["rlvr_scored"] == SCORED
    assert out["reward_extra_info"]["rlvr_status"][3] == "invalid_ground_truth"


def test_naive_reward_manager_per_sample(live_server: str, tokenizer) -> None:
    compute_score = get_custom_reward_fn(_config("compute_score"))
    manager = NaiveRewardManager(tokenizer, num_examine=0, compute_score=compute_score)
    data = _batch(tokenizer)
    out = manager(data, return_dict=True)
    assert _last_token_rewards(out["reward_tensor"], data) == EXPECTED
    assert out["reward_extra_info"]["rlvr_scored"] == SCORED


def test_on_null_raise_stops_the_step(live_server: str, tokenizer) -> None:
    config = _config("compute_score_batch")
    config.reward.custom_reward_function.reward_kwargs.on_null = "raise"
    manager = BatchRewardManager(tokenizer, num_examine=0, compute_score=get_custom_reward_fn(config))
    with pytest.raises(ValueError, match="invalid_ground_truth"):
        manager(_batch(tokenizer), return_dict=True)
