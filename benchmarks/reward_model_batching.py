"""The ``reward_model`` component's dynamic batching against one item per hand-off, in one run.

A small sequence-classification model (a random Qwen2, 4 layers of 256, about 3.5M parameters; nothing is
downloaded) is saved to a temporary directory and served by ``python -m reward_server`` twice:

* ``batch 1``: ``RLVR_REWARD_MODEL_BATCH_SIZE=1``, every item its own hand-off and forward pass: the baseline;
* ``batch 16``: the default, a group's completions in one hand-off.

Each way scores ``--groups`` groups of 16 completions (about 400 characters each, one prompt per group) in one
``POST /v1/rewards``, ``--rounds`` times, and keeps its best round. One worker, ``--threads`` torch threads.

Usage: ``PYTHONPATH=. python benchmarks/reward_model_batching.py [--groups 8] [--rounds 3] [--threads 1]``.
Needs the train extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from _serve import local_server

from trainer.tiny import build_tokenizer


def build_model(path: Path) -> None:
    tokenizer = build_tokenizer(["0123456789 +-*/= the sum of and is so we get carry"] * 20, vocab_size=300)
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    transformers.Qwen2ForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def items(groups: int) -> list[dict[str, Any]]:
    rng = random.Random(0)
    out = []
    for g in range(groups):
        for c in range(16):
            steps = [f"{rng.randint(10, 99)} + {rng.randint(10, 99)} = {rng.randint(20, 198)}" for _ in range(24)]
            out.append(
                {
                    "id": f"g{g}-c{c}",
                    "prompt": f"question {g}",
                    "response": "<think>" + "\n".join(steps) + "</think> so the sum is 42",
                    "ground_truth": "42",
                    "components": {"reward_model": 1.0},
                }
            )
    return out


async def measure(model: Path, batch_size: int, body: list[dict[str, Any]], rounds: int, threads: int) -> float:
    env = {
        "RLVR_MATH_WORKERS": "1",
        "RLVR_PRELOAD_LANGUAGE_MODELS": "false",
        "RLVR_REWARD_MODEL_PATH": str(model),
        "RLVR_REWARD_MODEL_BATCH_SIZE": str(batch_size),
        "RLVR_REWARD_MODEL_THREADS": str(threads),
    }
    best = float("inf")
    async with local_server(env, ready_timeout_s=600) as client:
        for _ in range(rounds):
            start = time.perf_counter()
            r = await client.post("/v1/rewards", json={"items": body})
            elapsed = time.perf_counter() - start
            results = r.json()["results"]
            assert r.status_code == 200 and all(x["status"] == "ok" for x in results), r.text[:500]
            best = min(best, elapsed)
    return len(body) / best


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    body = items(args.groups)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "rm"
        build_model(model)
        one = await measure(model, 1, body, args.rounds, args.threads)
        batched = await measure(model, 16, body, args.rounds, args.threads)
    load = os.getloadavg()[0]
    print(f"{len(body)} items, {args.threads} thread(s), load average {load:.1f}")
    print(f"batch 1:  {one:8.1f} items/s")
    print(f"batch 16: {batched:8.1f} items/s  ({batched / one:.2f}x batch 1)")


if __name__ == "__main__":
    asyncio.run(main())
