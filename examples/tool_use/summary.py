"""The tool-use example's figures from the trainer's metrics, for one run or over several (seeds):

    python examples/tool_use/summary.py OUT                      # one run: OUT/summary.json
    python examples/tool_use/summary.py runs/s1 runs/s2 runs/s3  # each run's summary.json, a table of
                                                                 # mean [min, max] and curves.png beside the runs

Per arm (``OUT/<arm>/metrics.jsonl``): held-out greedy pass@1 with the tool at the start (step 0) and after the last
step; the tool-call rate (``tools/calls_per_completion``; with ``max_tool_calling_iterations: 1`` the share of
completions that call the tool), the tool-error rate (``tools/error_rate``: calls whose status is not ``ok``) and the
training reward, each at the first step (the start's own samples: no update has been made yet) and as the mean of the
last ``--window`` steps, and the same per step.
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
#: (key, label) of the table over runs, in its order.
TABLE = [
    ("pass@1_start", "held-out greedy pass@1, start"),
    ("pass@1_after", "held-out greedy pass@1, after"),
    ("tool_call_rate_first", "tool-call rate, step 1 (the start's samples)"),
    ("tool_call_rate_last", "tool-call rate, last 3 steps"),
    ("tool_error_rate_first", "tool-error rate, step 1"),
    ("tool_error_rate_last", "tool-error rate, last 3 steps"),
    ("reward_first", "sampled reward, step 1"),
    ("reward_last", "sampled reward, last 3 steps"),
]


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
        out[f"{name}_first"] = values[0] if values else None
        out[f"{name}_last"] = _mean(values[-window:])
    out["per_step"] = [{"step": r["step"], **{n: r.get(k) for n, k in PER_STEP.items()}} for r in steps]
    out["eval_per_step"] = [{"step": r["step"], "pass@1": r["eval/pass@1"]} for r in evals]
    return out


def run_summary(out: Path, window: int) -> dict[str, Any]:
    """Every arm of one run directory that has a ``metrics.jsonl``."""
    return {arm: arm_summary(read_metrics(out / arm), window) for arm in ARMS if (out / arm / "metrics.jsonl").exists()}


def table(runs: list[dict[str, Any]]) -> str:
    """A markdown table of each arm's figures over the runs: mean [min, max], rates in percent."""
    arms = [a for a in ARMS if all(a in r for r in runs)]
    lines = ["| figure | " + " | ".join(arms) + " |", "| --- |" + " --- |" * len(arms)]
    for key, label in TABLE:
        cells = []
        for arm in arms:
            values = [100 * r[arm][key] for r in runs if r[arm][key] is not None]
            mean = _mean(values)
            cells.append("" if mean is None else f"{mean:.1f}% [{min(values):.1f}, {max(values):.1f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], names: list[str], path: Path) -> None:
    """Per step, each run's tool-call rate and sampled reward, and its held-out greedy pass@1 at each evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ARMS), figsize=(6 * len(ARMS), 4), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], ARMS, strict=True):
        for i, (run, name) in enumerate(zip(runs, names, strict=True)):
            if arm not in run:
                continue
            steps = run[arm]["per_step"]
            color = f"C{i}"
            ax.plot(
                [s["step"] for s in steps], [s["tool_call_rate"] for s in steps], color=color, label=f"{name} calls"
            )
            ax.plot([s["step"] for s in steps], [s["reward"] for s in steps], color=color, ls="--", label="reward")
            evals = run[arm]["eval_per_step"]
            ax.plot([e["step"] for e in evals], [e["pass@1"] for e in evals], "o:", color=color, label="pass@1")
        ax.set_title(arm)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("tool-call rate (-), reward (--), held-out greedy pass@1 (o)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="+", help="run directories (run.sh's OUT)")
    parser.add_argument("--window", type=int, default=3, help="steps averaged at the end")
    args = parser.parse_args()
    runs = []
    for out in args.out:
        summary = run_summary(out, args.window)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        runs.append(summary)
        for arm, s in summary.items():
            print(
                f"{out} {arm}: held-out pass@1 {s['pass@1_start']} -> {s['pass@1_after']}; tool-call rate "
                f"{s['tool_call_rate_first']:.3f} -> {s['tool_call_rate_last']:.3f}; tool-error rate "
                f"{s['tool_error_rate_first']:.3f} -> {s['tool_error_rate_last']:.3f}; reward "
                f"{s['reward_first']:.3f} -> {s['reward_last']:.3f}"
            )
    if len(runs) > 1:
        print(table(runs))
        path = args.out[0].parent / "curves.png"
        plot(runs, [p.name for p in args.out], path)
        print(f"curves: {path}")


if __name__ == "__main__":
    main()
