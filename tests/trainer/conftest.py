"""Fixtures for trainer tests: a tiny random model with its own tokenizer, prompt files and a stand-in server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.tiny import build_tiny_model, build_tokenizer, supervised_warm_up

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    """Tiny models gain nothing from more threads, and on a busy machine OpenMP threads spin against each other
    (30 warm-up steps took 31 s instead of 0.65 s on the shared 2-core box)."""
    torch.set_num_threads(1)


def arithmetic_rows(n: int, offset: int = 0) -> list[dict[str, Any]]:
    """``What is a plus b?`` prompts with their sums as ground truth."""
    rows = []
    for i in range(offset, offset + n):
        a, b = i % 7, (3 * i) % 5
        rows.append({"prompt": f"What is {a} plus {b}?", "ground_truth": str(a + b), "task": "math"})
    return rows


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Qwen2 (about 100k parameters) and a BPE tokenizer trained here, saved in HF format."""
    corpus = [f"What is {a} plus {b}? {a + b}" for a in range(10) for b in range(10)]
    tokenizer = build_tokenizer(corpus, vocab_size=300, extra_tokens=["<answer>", "</answer>"])
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, seed=0)
    path = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Qwen2 for the vLLM tests, warmed up to answer ``What is a plus b?`` with a digit and EOS.

    Its heads are 32 wide: vLLM's CPU attention has no kernel for the 16-wide heads of :func:`tiny_model_dir`
    ("Unsupported CPU attention configuration: head_dim=16"). The warm-up (40 steps, ~5 s) makes most completions
    end with EOS after two or three tokens, so a batch has both finished and truncated rows.
    """
    corpus = [f"What is {a} plus {b}? {a + b}" for a in range(10) for b in range(10)]
    tokenizer = build_tokenizer(corpus, vocab_size=300, extra_tokens=["<answer>", "</answer>"])
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, seed=0)
    pairs = [(f"What is {a} plus {b}?", f" {a + b}") for a in range(7) for b in range(5)]
    supervised_warm_up(model, tokenizer, pairs, steps=40, batch_size=16, learning_rate=3e-3)
    path = tmp_path_factory.mktemp("vllm_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def prompt_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(train.jsonl, eval.jsonl)`` with 12 and 4 arithmetic prompts."""
    root = tmp_path_factory.mktemp("prompts")
    train, held_out = root / "train.jsonl", root / "eval.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_rows(12)))
    held_out.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_rows(4, offset=100)))
    return train, held_out
