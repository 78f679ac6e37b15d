"""Build the arithmetic example's data, tokenizer and tiny model, and give the model a short supervised warm-up.

Writes, under ``--out`` (default ``examples/arithmetic/runs``):

* ``data/train.jsonl``, ``data/test.jsonl``: GRPO prompts with ``ground_truth`` (held-out problems never share
  their numbers and operation with a training problem);
* ``sft/``: the warmed-up policy in Hugging Face format (a Qwen2 of a few million parameters and its own BPE
  tokenizer), the starting point of ``grpo.yaml``.

The warm-up is deliberately short: it teaches the answer format (``<think>`` working ``</think>`` then
``<answer>`` result ``</answer>``) and some arithmetic, and stops while the policy still gets a good share of
problems wrong, so GRPO has room to improve and still samples right answers to learn from.

Run: ``python examples/arithmetic/prepare.py`` (about three minutes on two CPU cores).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from trainer.tiny import build_tiny_model, build_tokenizer

NAMES = ["Tom", "Ana", "Li", "Sam", "Mia", "Omar", "Eva", "Raj", "Zoe", "Ben"]
ITEMS = ["apples", "books", "coins", "stamps", "pens", "shells", "cards", "marbles"]

# (template, operation). {n} name, {i} item, {a} and {b} the numbers.
TEMPLATES = [
    ("{n} has {a} {i}. {n} gets {b} more {i}. How many {i} does {n} have now?", "+"),
    ("There are {a} {i} in a box and {b} {i} on a table. How many {i} are there in all?", "+"),
    ("{n} had {a} {i} and gave {b} of them away. How many {i} does {n} have left?", "-"),
    ("A shelf holds {a} {i}. {n} takes {b} {i} off the shelf. How many {i} are still on it?", "-"),
]


def working(a: int, b: int, op: str) -> str:
    """Column arithmetic written out digit by digit: short steps a tiny model can learn, and check."""
    a1, a0, b1, b0 = a // 10, a % 10, b // 10, b % 10
    if op == "+":
        units = a0 + b0
        carry = units // 10
        first = f"{a0} + {b0} = {units}" + (", carry 1." if carry else ".")
        second = f"{a1} + {b1}" + (" + 1" if carry else "") + f" = {a1 + b1 + carry}."
        return f"{first} {second}"
    borrow = a0 < b0
    first = f"{a0 + 10} - {b0} = {a0 + 10 - b0}, borrow 1." if borrow else f"{a0} - {b0} = {a0 - b0}."
    second = f"{a1}" + (" - 1" if borrow else "") + f" - {b1} = {a1 - borrow - b1}."
    return f"{first} {second}"


def make_problem(rng: random.Random, template: str, op: str, a: int, b: int) -> dict[str, str]:
    """One row: the prompt, the ground truth, and the completion the warm-up imitates."""
    if op == "-" and b > a:
        a, b = b, a
    answer = a + b if op == "+" else a - b
    question = template.format(n=rng.choice(NAMES), i=rng.choice(ITEMS), a=a, b=b)
    return {
        "prompt": f"{question}\n",
        "ground_truth": str(answer),
        "completion": f"<think>{working(a, b, op)}</think>\n<answer>{answer}</answer>",
        "key": f"{min(a, b)}{op}{max(a, b)}",
    }


def make_splits(seed: int, n_test: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Every two-digit pair for each operation, split so no test (numbers, operation) appears in training."""
    rng = random.Random(seed)
    problems = []
    for template, op in TEMPLATES:
        for a in range(10, 100):
            for b in range(10, 100):
                if op == "-" and b > a:
                    continue
                problems.append(make_problem(rng, template, op, a, b))
    keys = sorted({p["key"] for p in problems})
    rng.shuffle(keys)
    test_keys = set(keys[: n_test * 2])
    train = [p for p in problems if p["key"] not in test_keys]
    test = [p for p in problems if p["key"] in test_keys]
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test[:n_test]


def warm_up(model: torch.nn.Module, tokenizer, rows: list[dict[str, str]], *, steps: int, batch: int, lr: float) -> None:
    """Supervised fine-tuning on prompt + completion, loss on the completion tokens only."""
    eos = tokenizer.eos_token
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    start = time.time()
    for step in range(steps):
        chunk = [rows[(step * batch + k) % len(rows)] for k in range(batch)]
        prompts = [tokenizer(r["prompt"])["input_ids"] for r in chunk]
        answers = [tokenizer(r["completion"] + eos)["input_ids"] for r in chunk]
        width = max(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
        ids = torch.full((batch, width), tokenizer.pad_token_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for k, (p, a) in enumerate(zip(prompts, answers, strict=True)):
            ids[k, : len(p) + len(a)] = torch.tensor(p + a)
            labels[k, len(p) : len(p) + len(a)] = torch.tensor(a)
            mask[k, : len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == steps - 1:
            print(f"warm-up step {step:4d}  loss {loss.item():.3f}  {time.time() - start:5.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-size", type=int, default=200)
    parser.add_argument("--warmup-steps", type=int, default=300, help="supervised steps (the knob for start accuracy)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    train, test = make_splits(args.seed, args.test_size)
    data = args.out / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with (data / f"{name}.jsonl").open("w") as f:
            for r in rows:
                f.write(json.dumps({"prompt": r["prompt"], "ground_truth": r["ground_truth"], "task": "math"}) + "\n")
    print(f"{len(train)} training and {len(test)} held-out problems in {data}")

    corpus = [r["prompt"] + r["completion"] for r in train[:5000]]
    tokenizer = build_tokenizer(corpus, vocab_size=384, extra_tokens=["<think>", "</think>", "<answer>", "</answer>"])
    model = build_tiny_model(
        tokenizer, hidden_size=192, num_layers=4, num_heads=4, num_kv_heads=2, max_position_embeddings=256, seed=0
    )
    print(f"Qwen2 with {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(tokenizer)}")
    warm_up(model, tokenizer, train, steps=args.warmup_steps, batch=args.batch, lr=args.lr)
    model.save_pretrained(args.out / "sft")
    tokenizer.save_pretrained(args.out / "sft")
    print(f"saved the warmed-up policy to {args.out / 'sft'}")


if __name__ == "__main__":
    main()
