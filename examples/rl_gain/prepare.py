"""Build the RL example's data, tokenizer and random tiny model: an easy regime with worked solutions for the cold
start, and a regime with final answers only for the RL arms and the held-out evaluation.

Every problem reads "{name} has {a} {items}. {name} {verb} {b} {items}. How many {items} does {name} have now?", and
the verb alone says whether the answer is ``a + b`` or ``a - b``. The cold start (easy regime) sees eight verbs, with
a worked solution (the arithmetic example's column working, one operation a line) for each problem. The RL prompts
and the held-out set use eight other verbs, and no worked solution of one of them exists anywhere in the pipeline:
the reward is the only source of which operation a new verb means. ``new_words.py`` then starts each new verb at
the mean embedding of the known ones, so that the start samples both operations.

Designs measured and dropped (seed 0; docs/examples/rl_gain.md): new problem types ("gave 27 away and has 45 left;
how many at first?", comparisons) gave the cold start a pass@8 of 4.5% there; new multi-word verbs moved the
numbers' token positions and gave 1.5%. A tiny model reads the numbers by position, so every prompt here has the
same token layout (each verb is one token).

Writes, under ``--out`` (default ``examples/rl_gain/runs``):

* ``data/cold_start.jsonl``: ``--cold-start`` easy problems with their worked solution (``prompt``, ``completion``);
* ``data/train.jsonl``: answer-only problems with the new verbs (``prompt``, ``ground_truth``, ``type``, the verb),
  from which ``run.sh`` takes the RL prompts;
* ``data/test.jsonl``: ``--test-size`` held-out problems with the new verbs, whose (numbers, verb) never occur in
  training;
* ``data/easy_test.jsonl``: ``--test-size`` held-out easy problems (the cold start's own regime);
* ``base/``: a randomly initialised Qwen2 of a few million parameters and its own BPE tokenizer.

Run: ``python examples/rl_gain/prepare.py`` (seconds); ``run.sh`` runs the whole comparison.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
from pathlib import Path

from trainer.tiny import build_tiny_model, build_tokenizer

_spec = importlib.util.spec_from_file_location(
    "arithmetic_prepare", Path(__file__).parents[1] / "arithmetic/prepare.py"
)
assert _spec is not None and _spec.loader is not None
easy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(easy)

TEMPLATE = "{n} has {a} {i}. {n} {verb} {b} {i}. How many {i} does {n} have now?"
#: verb -> operation. The cold start's verbs, each with worked solutions.
EASY_VERBS = {
    "gets": "+",
    "buys": "+",
    "finds": "+",
    "wins": "+",
    "loses": "-",
    "sells": "-",
    "eats": "-",
    "breaks": "-",
}
#: The RL and held-out verbs: answers only.
HARD_VERBS = {
    "receives": "+",
    "earns": "+",
    "collects": "+",
    "gathers": "+",
    "drops": "-",
    "spends": "-",
    "burns": "-",
    "donates": "-",
}


def problems(verbs: dict[str, str], seed: int, n_test: int) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Every two-digit pair ``a >= b`` with each verb, split so that no held-out (pair, verb) is trained on.

    Each row has ``prompt``, ``ground_truth``, ``type`` (the verb), ``key`` and, the worked solution the cold start
    imitates, ``completion``.
    """
    rng = random.Random(seed)
    rows = []
    for verb, op in verbs.items():
        for a in range(10, 100):
            for b in range(10, a + 1):
                answer = a + b if op == "+" else a - b
                prompt = TEMPLATE.format(n=rng.choice(easy.NAMES), i=rng.choice(easy.ITEMS), a=a, b=b, verb=verb)
                rows.append(
                    {
                        "prompt": prompt + "\n",
                        "ground_truth": str(answer),
                        "completion": f"<think>{easy.working(a, b, op)}</think>\n<answer>{answer}</answer>",
                        "type": verb,
                        "key": f"{verb}:{a},{b}",
                    }
                )
    rng.shuffle(rows)
    return rows[n_test:], rows[:n_test]


def _write(path: Path, rows: list[dict[str, str]], keys: tuple[str, ...]) -> None:
    with path.open("w") as f:
        for r in rows:
            f.write(
                json.dumps({k: r[k] for k in keys if k in r} | ({"task": "math"} if "ground_truth" in keys else {}))
            )
            f.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "runs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's initialisation")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the problems and the held-out splits")
    parser.add_argument("--test-size", type=int, default=200)
    parser.add_argument("--cold-start", type=int, default=4000, help="easy problems in the cold-start SFT set")
    args = parser.parse_args()

    easy_train, easy_test = problems(EASY_VERBS, args.data_seed, args.test_size)
    hard_train, hard_test = problems(HARD_VERBS, args.data_seed + 1, args.test_size)
    data = args.out / "data"
    data.mkdir(parents=True, exist_ok=True)
    _write(data / "cold_start.jsonl", easy_train[: args.cold_start], ("prompt", "completion"))
    _write(data / "easy_test.jsonl", easy_test, ("prompt", "ground_truth", "type"))
    _write(data / "train.jsonl", hard_train, ("prompt", "ground_truth", "type"))
    _write(data / "test.jsonl", hard_test, ("prompt", "ground_truth", "type"))
    print(
        f"{args.cold_start} cold-start (easy verbs, worked), {len(hard_train)} RL (new verbs, answer only), "
        f"{len(hard_test)} held-out with new verbs and {len(easy_test)} held-out easy problems in {data}"
    )

    # The tokenizer sees the prompts of both regimes (no hard solution exists to show it) and the easy solutions.
    # Each verb is one token, so that every problem of both regimes has the same token layout: a tiny model reads
    # the numbers by position, and a verb of another length moved them (the first try with multi-word verbs gave
    # pass@8 1.5% on the new verbs, seed 0). A new verb's embedding is then untrained until RL moves it.
    corpus = [r["prompt"] + r["completion"] for r in easy_train[:5000]]
    verbs = [*EASY_VERBS, *HARD_VERBS]
    tokenizer = build_tokenizer(
        corpus, vocab_size=384, extra_tokens=["<think>", "</think>", "<answer>", "</answer>", *verbs]
    )
    model = build_tiny_model(
        tokenizer,
        hidden_size=192,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=256,
        seed=args.seed,
    )
    print(f"Qwen2 with {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(tokenizer)}")
    model.save_pretrained(args.out / "base")
    tokenizer.save_pretrained(args.out / "base")


if __name__ == "__main__":
    main()
