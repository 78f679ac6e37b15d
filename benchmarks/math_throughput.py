"""Math reward throughput: our server's POST /v1/rewards against a plain serial math-verify loop.

Builds 8,000 items (the 500 MATH-500 problems x 16 completions, a GRPO batch per 16 problems) that mix
correct, wrong, truncated (cut off mid-reasoning) and long-reasoning completions, each group sharing its
reference, then measures in one run:

* baseline: ``math_verify.verify(parse(gold), parse(response))`` in a serial loop in this process, the way
  TRL's and open-r1's accuracy rewards call it (gold wrapped in ``$...$`` so that math-verify finds it);
* ours: the same items through ``POST /v1/rewards`` of a server started here with its defaults
  (``python -m reward_server`` on 127.0.0.1, one math worker per core), sent as whole groups, 256 items
  per request (16 prompts x 16 completions), first with ONE request in flight (a trainer that sends its
  batch and waits), then with two.

The baseline runs in two halves, before and after the server runs, so that a change in the machine's load
during the run moves both sides. Usage: ``python benchmarks/math_throughput.py [--problems 500]
[--group-size 16] [--batch 256]``. Prints items/s for each and the ratios, with the load average. Data
comes from ``RLVR_DATA_DIR`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import re
import time
from pathlib import Path

from _serve import REPO, local_server

DATA = Path(os.environ.get("RLVR_DATA_DIR", REPO.parent / "shared" / "data"))

# Of each group of 16: 6 correct, 5 wrong, 2 unanswered (cut off mid-reasoning), 3 long correct ones.
MIX = ["correct"] * 6 + ["wrong"] * 5 + ["unanswered"] * 2 + ["long"] * 3


def wrong_value(answer: str) -> str:
    """Bump the last digit of the value (not of a unit such as ``\\mbox{ cm}^2``, which is no value)."""
    unit = re.search(r"\\(?:mbox|text)\{", answer)
    digits = list(re.finditer(r"\d", answer[: unit.start()] if unit and unit.start() > 0 else answer))
    if digits:
        d = digits[-1]
        return answer[: d.start()] + str((int(d.group()) + 1) % 10) + answer[d.end() :]
    return answer + "+1"


def build_items(problems: int, group_size: int, seed: int = 0) -> list[dict]:
    rows = [json.loads(line) for line in (DATA / "math500.jsonl").read_text().splitlines()][:problems]
    rng = random.Random(seed)
    items = []
    for p, row in enumerate(rows):
        reasoning = row["solution"].rsplit("\\boxed", 1)[0]
        for g in range(group_size):
            kind = MIX[g % len(MIX)]
            if kind == "correct":
                text = f"<think>\n{reasoning}\n</think>\nThe answer is $\\boxed{{{row['answer']}}}$."
            elif kind == "wrong":
                text = f"<think>\n{reasoning}\n</think>\nThe answer is $\\boxed{{{wrong_value(row['answer'])}}}$."
            elif kind == "unanswered":
                text = f"<think>\n{reasoning[: rng.randint(50, max(60, len(reasoning)))]}"
            else:
                long_reasoning = (reasoning + "\n") * 4
                text = f"<think>\n{long_reasoning}</think>\nSo the final answer is $\\boxed{{{row['answer']}}}$."
            items.append({"id": f"p{p}-{g}", "response": text, "ground_truth": row["answer"], "kind": kind})
    return items


def run_baseline(items: list[dict]) -> tuple[float, list[bool]]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    verdicts = []
    start = time.perf_counter()
    for it in items:
        verdicts.append(bool(verify(parse(f"${it['ground_truth']}$"), parse(it["response"]))))
    return time.perf_counter() - start, verdicts


async def run_server(items: list[dict], batch: int, in_flight: tuple[int, ...]) -> list[tuple[float, list]]:
    """Time the items through one server, once per entry of ``in_flight`` (concurrent requests)."""
    body = [{k: v for k, v in it.items() if k != "kind"} for it in items]
    chunks = [body[i : i + batch] for i in range(0, len(body), batch)]
    runs = []
    async with local_server() as client:
        (await client.post("/v1/rewards", json={"items": chunks[0]})).raise_for_status()  # warm-up
        for concurrent in in_flight:
            rewards: list[float | None] = [None] * len(items)
            sem = asyncio.Semaphore(concurrent)

            async def send(ci: int, sem: asyncio.Semaphore = sem, rewards: list = rewards) -> None:
                async with sem:
                    r = await client.post("/v1/rewards", json={"items": chunks[ci]})
                    r.raise_for_status()
                    for j, res in enumerate(r.json()["results"]):
                        rewards[ci * batch + j] = res["reward"]

            start = time.perf_counter()
            await asyncio.gather(*(send(i) for i in range(len(chunks))))
            runs.append((time.perf_counter() - start, rewards))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256, help="items per request")
    args = ap.parse_args()

    items = build_items(args.problems, args.group_size)
    print(f"{len(items)} items ({args.problems} problems x {args.group_size}), {os.cpu_count()} cores")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    half = len(items) // 2
    base_s1, verdicts1 = run_baseline(items[:half])
    (one_s, one), (two_s, two) = asyncio.run(run_server(items, args.batch, (1, 2)))
    base_s2, verdicts2 = run_baseline(items[half:])
    base_s, base_verdicts = base_s1 + base_s2, verdicts1 + verdicts2

    expected = [it["kind"] in ("correct", "long") for it in items]
    base_right = sum(v == e for v, e in zip(base_verdicts, expected, strict=True))
    n = len(items)
    print(f"baseline  serial parse+verify        : {n / base_s:8.1f} items/s ({base_s:.1f} s)")
    for label, seconds, rewards in (("1 request in flight", one_s, one), ("2 requests in flight", two_s, two)):
        right = sum((r == 1.0) == e for r, e in zip(rewards, expected, strict=True))
        nulls = sum(r is None for r in rewards)
        print(
            f"rlvr      {label:26} : {n / seconds:8.1f} items/s ({seconds:.1f} s), ratio {base_s / seconds:5.2f}x, "
            f"verdicts right {right}/{n}, null rewards {nulls}"
        )
    print(f"baseline verdicts right: {base_right}/{n}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
