"""In-process cost of the math verifier per item, against another checkout of the project in the same run.

The items are those of ``math_throughput.py`` (MATH-500's problems x 16 completions: correct, wrong, cut off
and long ones). Each side runs in its own fresh process, as a worker does: ``init_worker()``, then one serial
pass of ``verify_payload`` over the items (a group's reference is parsed once and cached, answers are new).
The two sides alternate ``--rounds`` times, so a load change on the machine hits both; the best round of
each is compared.

Usage: ``python benchmarks/math_verifier_cost.py --baseline /path/to/other/checkout [--problems 500]``.
Prints µs per item for both and the ratio (this checkout / baseline); > 1 means this one is slower.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _serve import REPO

_CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
from math_throughput import build_items
from reward_server.verifiers.math import init_worker, verify_payload
items = build_items({problems}, {group_size})
init_worker()
start = time.perf_counter()
rewards = [verify_payload({{"response": it["response"], "ground_truth": it["ground_truth"]}})["reward"] for it in items]
elapsed = time.perf_counter() - start
right = sum((r == 1.0) == (it["kind"] in ("correct", "long")) for r, it in zip(rewards, items))
print(json.dumps({{"seconds": elapsed, "items": len(items), "right": right}}))
"""


def run(repo: Path, problems: int, group_size: int) -> dict[str, float]:
    code = _CHILD.format(bench=str(REPO / "benchmarks"), problems=problems, group_size=group_size)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=repo, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout (e.g. main's worktree)")
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for name, repo in (("this", REPO), ("baseline", args.baseline.resolve())):
            result = run(repo, args.problems, args.group_size)
            if name not in best or result["seconds"] < best[name]["seconds"]:
                best[name] = result
    for name in ("baseline", "this"):
        r = best[name]
        print(
            f"{name:9s}: {1e6 * r['seconds'] / r['items']:7.1f} µs/item ({r['items']:.0f} items, best of "
            f"{args.rounds}); verdicts matching construction {r['right']:.0f}/{r['items']:.0f}"
        )
    print(f"ratio this/baseline: {best['this']['seconds'] / best['baseline']['seconds']:.3f}")


if __name__ == "__main__":
    main()
