"""The tool-use example's figures from the trainer's metrics: ``python examples/tool_use/summary.py OUT``.

Per arm (``OUT/<arm>/metrics.jsonl``): held-out greedy pass@1 with the tool at the start (step 0) and after the last
step; the tool-call rate (``tools/calls_per_completion``; with ``max_tool_calling_iterations: 1`` the share of
completions that call the tool), the tool-error rate (``tools/error_rate``: calls whose status is not ``ok``) and the
training reward, each as the mean of the first and of the last ``--window`` steps. Writes ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainer.metrics import read_metrics

ARMS = ("grpo", "random_reward")
PER_STEP = {
    "tool_call_rate": "tools/calls_per_completion",
    "tool_error_rate": "tools/error_rate",
    "reward": "reward/mean",
}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def arm_summary(rows: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """The figures of one arm's metric rows (step 0 holds the start's evaluation)."""
    evals = [r for r in rows if "eval/pass@1" in r]
    steps = [r for r in rows if r["step"] > 0 and "reward/mean" in r]
    out: dict[str, Any] = {
        "steps": len(steps),
        "pass@1_start": evals[0]["eval/pass@1"] if evals and evals[0]["step"] == 0 else None,
        "pass@1_after": evals[-1]["eval/pass@1"] if evals and evals[-1]["step"] > 0 else None,
        "eval_prompts": evals[0].get("eval/num_prompts") if evals else None,
    }
    for name, key in PER_STEP.items():
        values = [float(r[key]) for r in steps if key in r]
        out[f"{name}_first"] = _mean(values[:window])
        out[f"{name}_last"] = _mean(values[-window:])
    out["per_step"] = [{"step": r["step"], **{n: r.get(k) for n, k in PER_STEP.items()}} for r in steps]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--window", type=int, default=3, help="steps averaged at the start and at the end")
    args = parser.parse_args()
    summary = {
        arm: arm_summary(read_metrics(args.out / arm), args.window)
        for arm in ARMS
        if (args.out / arm / "metrics.jsonl").exists()
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for arm, s in summary.items():
        print(
            f"{arm}: held-out pass@1 {s['pass@1_start']} -> {s['pass@1_after']}; tool-call rate "
            f"{s['tool_call_rate_first']:.3f} -> {s['tool_call_rate_last']:.3f}; tool-error rate "
            f"{s['tool_error_rate_first']:.3f} -> {s['tool_error_rate_last']:.3f}; reward "
            f"{s['reward_first']:.3f} -> {s['reward_last']:.3f}"
        )


if __name__ == "__main__":
    main()
