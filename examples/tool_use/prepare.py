"""Build the tool-use example's data, tokenizer and random tiny model: three-digit multiplications that a tiny model
cannot do in its head but solves by writing one line of Python and copying the output into its answer.

Every problem reads ``Compute {a} times {b}.`` with ``a`` and ``b`` from 100 to 999. Two ways to answer are shown in
the cold start:

* with the tool (a ``--tool-share`` of the cold-start rows): ``print(a*b)`` in a fenced python block, the output
  block the sandbox answers with, then ``<answer>{a*b}</answer>``;
* without it (the rest): ``<answer>{a*b}</answer>`` straight away, a six-digit number the model can only guess.

With a tool share under one half the cold-start model answers greedily without the tool (held-out pass@1 near 0)
and calls it in about that share of its samples: room for RL, whose reward (the math verifier on ``<answer>``, the
model's own text only: tool output is never scored) pays only the completions that called the tool and copied its
output.

Writes, under ``--out`` (default ``examples/tool_use/runs``):

* ``data/cold_start.jsonl``: ``--cold-start`` rows (``prompt``, ``completion``);
* ``data/train.jsonl``: RL prompts (``prompt``, ``ground_truth``, ``task``);
* ``data/test.jsonl``: ``--test-size`` held-out problems whose (a, b) never occur in training;
* ``base/``: a randomly initialised Qwen2 and its own BPE tokenizer. The fences are single tokens, and numbers are
  cut into chunks of up to three digits from the left, each chunk one token, as Llama 3's and GPT-4's tokenizers do
  (``155848`` is ``155`` ``848``): an operand is one token to copy into the call, a product two tokens to copy into
  the answer. With one token a digit, the cold start's 600 tool rows do not teach the copy (tried: the tool-calling
  samples wrote other operands and other answers, and the reward stayed 0).

Run: ``python examples/tool_use/prepare.py`` (seconds); ``run.sh`` runs the whole example.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from trainer.tiny import build_tiny_model, build_tokenizer

FENCES = ["```python", "```output", "```"]
TAGS = ["<answer>", "</answer>"]
NUMBER_CHUNKS = [str(n) for n in range(10, 1000)]  # "0".."9" are in the byte-level alphabet already


def prompt(a: int, b: int) -> str:
    """The problem, as the cold start, the RL prompts and the held-out set all read it."""
    return f"Compute {a} times {b}.\n"


def with_tool(a: int, b: int) -> str:
    """The completion that calls the tool: the call, the sandbox's output block (as the trainer renders it), the
    answer copied from it."""
    return f"```python\nprint({a}*{b})\n```\n```output\n{a * b}\n```\n<answer>{a * b}</answer>"


def without_tool(a: int, b: int) -> str:
    """The completion that answers at once."""
    return f"<answer>{a * b}</answer>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "runs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's initialisation")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the problems and the held-out split")
    parser.add_argument("--test-size", type=int, default=100)
    parser.add_argument(
        "--cold-start",
        type=int,
        default=40000,
        help="rows of the cold-start SFT set: enough that SFT sees each about twice and must copy, not memorise",
    )
    parser.add_argument("--rl-prompts", type=int, default=5000, help="rows of the RL prompt set")
    parser.add_argument("--tool-share", type=float, default=0.3, help="share of cold-start rows that call the tool")
    args = parser.parse_args()

    rng = random.Random(args.data_seed)
    wanted = args.test_size + args.cold_start + args.rl_prompts
    pairs_seen: set[tuple[int, int]] = set()
    while len(pairs_seen) < wanted:
        pairs_seen.add((rng.randint(100, 999), rng.randint(100, 999)))
    pairs = sorted(pairs_seen)
    rng.shuffle(pairs)
    test, rest = pairs[: args.test_size], pairs[args.test_size :]
    cold, train = rest[: args.cold_start], rest[args.cold_start : args.cold_start + args.rl_prompts]
    data = args.out / "data"
    data.mkdir(parents=True, exist_ok=True)
    n_tool = round(args.tool_share * len(cold))
    with (data / "cold_start.jsonl").open("w") as f:
        for i, (a, b) in enumerate(cold):
            completion = with_tool(a, b) if i < n_tool else without_tool(a, b)
            f.write(json.dumps({"prompt": prompt(a, b), "completion": completion}) + "\n")
    for name, rows in (("train", train), ("test", test)):
        with (data / f"{name}.jsonl").open("w") as f:
            for a, b in rows:
                row = {"prompt": prompt(a, b), "ground_truth": str(a * b), "task": "math"}
                f.write(json.dumps(row) + "\n")
    print(
        f"{len(cold)} cold-start rows ({n_tool} with the tool), {len(train)} RL prompts, {len(test)} held-out in {data}"
    )

    corpus = [prompt(a, b) + with_tool(a, b) for a, b in cold[:1000]]
    tokenizer = build_tokenizer(corpus, vocab_size=300, extra_tokens=[*FENCES, *TAGS, *NUMBER_CHUNKS])
    model = build_tiny_model(
        tokenizer,
        hidden_size=128,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=128,
        seed=args.seed,
    )
    print(f"Qwen2 with {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(tokenizer)}")
    model.save_pretrained(args.out / "base")
    tokenizer.save_pretrained(args.out / "base")


if __name__ == "__main__":
    main()
