"""``python -m trainer plot RUN_DIR``: the run's curves from ``metrics.jsonl`` to PNG."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from trainer.metrics import read_metrics

#: Drawn first and in this order when present; every other numeric metric follows alphabetically.
HEADLINE = (
    "eval/pass@1",
    "reward/mean",
    "reward/accuracy",
    "reward/format",
    "reward/frac_null",
    "adv/frac_zero_std_groups",
    "loss/policy",
    "loss/kl",
    "policy/clip_ratio",
    "policy/entropy",
    "completions/mean_length",
    "completions/clipped_ratio",
    "timing/generate",
    "timing/reward_wait",
    "timing/update",
    "perf/tokens_per_s",
)


def plot_run(run_dir: str | Path, *, metrics: Sequence[str] | None = None, out: str | Path | None = None) -> Path:
    """Draw one small panel per metric against the step and save ``run_dir/curves.png`` (or ``out``).

    Args:
        run_dir: a trainer run directory.
        metrics: the metric names to draw; default: :data:`HEADLINE` then every other numeric metric.
        out: the PNG path.

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` in ``run_dir``.
        ValueError: no step logged yet, or none of the requested metrics was logged.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir}/metrics.jsonl holds no step yet; plot once the run has logged one")
    logged = {k for r in rows for k, v in r.items() if k != "step" and isinstance(v, int | float)}
    names = list(metrics) if metrics else [m for m in HEADLINE if m in logged] + sorted(logged - set(HEADLINE))
    names = [n for n in names if n in logged]
    if not names:
        raise ValueError(f"none of the metrics {list(metrics or HEADLINE)} is in {run_dir}/metrics.jsonl")
    cols = min(4, len(names))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.8 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        points = [(r["step"], r[name]) for r in rows if isinstance(r.get(name), int | float)]
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, linewidth=1.2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(str(Path(run_dir).resolve().name), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # leave room for the title
    path = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
