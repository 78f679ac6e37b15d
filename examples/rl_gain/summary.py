"""The RL example's figures: for the start and each arm, held-out greedy pass@1, sampled pass@1 and pass@8 at the
training temperature, greedy pass@1 by problem type and on the easy regime; for one run, or as mean [min, max]
over several (seeds); and R1-Zero's figure (accuracy and response length per step) from the RL arms' logs.

    python examples/rl_gain/summary.py examples/rl_gain/runs            # one run: summary.json, summary.md
    python examples/rl_gain/summary.py runs/seed0 runs/seed1 runs/seed2  # over the runs, + curves.png beside them

Each run directory is what ``run.sh`` wrote (``eval/<arm>{,_t1,_easy,_more}/summary.json`` and ``samples.jsonl``,
``<arm>/metrics.jsonl``, ``times.jsonl``). ``summary.json`` holds ``{"start": {"pass1": x}, "grpo": {"pass1": x},
...}`` for one run (each ``pass1`` the held-out greedy pass@1 in [0, 1]), and the runs and their mean for several.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from collections import defaultdict
from importlib import metadata
from pathlib import Path
from typing import Any

#: (key, label) in the table's order.
ARMS = [
    ("start", "start (cold-start SFT on the easy regime)"),
    ("grpo", "GRPO, outcome supervision"),
    ("rft_online", "online RFT (verified = 1, else 0; no baseline)"),
    ("rft_offline", "offline RFT (sample once, SFT on the verified)"),
    ("random_reward", "GRPO with shuffled rewards (control)"),
    ("random_reward_group", "GRPO with rewards shuffled within groups (control)"),
    ("process", "GRPO, process supervision"),
    ("gspo", "GSPO (sequence ratio)"),
    ("cispo", "CISPO (clipped weight)"),
    ("rloo", "RLOO baseline"),
]
#: (key, label, unit) of each arm's figures.
FIGURES = [
    ("pass1", "greedy pass@1", "%"),
    ("pass1_t1", "pass@1, T=1 (8 samples)", "%"),
    ("pass8_t1", "pass@8, T=1", "%"),
    ("easy_pass1", "easy regime greedy pass@1", "%"),
    ("pass1_more", "greedy pass@1, larger held-out set", "%"),
]
#: Figures shown only where some run has them (runs from before ``run.sh`` wrote them lack them).
OPTIONAL = {"pass1_more"}
#: (figure key, label) of each per-run gain over the start, shown where its figure is.
GAINS = [("pass1", "greedy gain per run (points)"), ("pass1_more", "gain on the larger set per run (points)")]
RL_ARMS = ("grpo", "rft_online", "random_reward", "random_reward_group", "process", "gspo", "cispo", "rloo")


def environment() -> dict[str, Any]:
    """Library versions, CPU and load: what a figure depends on."""
    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.exists():
        names = [line.split(":", 1)[1].strip() for line in info.read_text().splitlines() if "model name" in line]
        cpu = f"{names[0]} x {len(names)}" if names else cpu
    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers", "tokenizers", "math-verify"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"python": platform.python_version(), **versions, "cpu": cpu, "load_average": list(os.getloadavg())}


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _greedy_rows(run: Path, arm: str) -> list[tuple[dict[str, Any], str, float | None]]:
    """Each greedy answer of an arm's evaluation as ``(problem, completion, score)``: the problem is the row of
    ``data/test.jsonl`` its ``source_index`` names, the score its ``accuracy`` component (else its reward; ``None``
    when unscored). ``[]`` without the files."""
    samples, test = run / "eval" / arm / "samples.jsonl", run / "data" / "test.jsonl"
    if not samples.exists() or not test.exists():
        return []
    problems = [json.loads(line) for line in test.read_text().splitlines()]
    rows = []
    for line in samples.read_text().splitlines():
        row = json.loads(line)
        accuracy = (row.get("reward_components") or {}).get("accuracy") or {}
        score = accuracy.get("score", row.get("reward"))
        rows.append((problems[row["source_index"]], row.get("completion", ""), None if score is None else float(score)))
    return rows


def _by_type(rows: list[tuple[dict[str, Any], str, float | None]]) -> dict[str, float]:
    """Greedy pass@1 of each problem type (verb, the test set's ``type`` column) over :func:`_greedy_rows`."""
    right: dict[str, list[float]] = defaultdict(list)
    for problem, _, score in rows:
        if score is not None:
            right[problem.get("type", "?")].append(score)
    return {k: sum(v) / len(v) for k, v in sorted(right.items())}


_OPERATION = re.compile(r"\d ([+-]) \d")


def _operation_split(rows: list[tuple[dict[str, Any], str, float | None]]) -> dict[str, float]:
    """Whether the greedy answers (:func:`_greedy_rows`) chose the right operation, and how often the arithmetic
    was right when they did.

    The operation is the first ``d op d`` of a completion's working; the right one is ``+`` where the answer is
    above the problem's first number. Returns ``{"operation_right": share of answers with the right operation,
    "correct_given_operation": share of those that are correct}`` (``{}`` without answers): what tells a loss of
    the new verbs' meaning from a loss of the arithmetic.
    """
    right_op, correct, total = 0, 0.0, 0
    for problem, completion, score in rows:
        numbers = re.findall(r"\d+", problem.get("prompt", ""))
        if not numbers or not str(problem.get("ground_truth", "")).isdigit():
            continue  # not a problem of this example's form
        truth = "+" if int(problem["ground_truth"]) > int(numbers[0]) else "-"
        found = _OPERATION.search(completion)
        total += 1
        if found and found.group(1) == truth:
            right_op += 1
            correct += score or 0.0
    if not total:
        return {}
    return {"operation_right": right_op / total, "correct_given_operation": correct / right_op if right_op else 0.0}


def one_run(run: Path) -> dict[str, Any]:
    """The figures of one ``run.sh`` output directory: ``{arm: {pass1, pass1_t1, pass8_t1, easy_pass1, ...}}``."""
    out: dict[str, Any] = {}
    for arm, _ in ARMS:
        greedy = _read(run / "eval" / arm / "summary.json")
        if greedy is None:
            continue
        sampled = _read(run / "eval" / f"{arm}_t1" / "summary.json") or {}
        easy = _read(run / "eval" / f"{arm}_easy" / "summary.json") or {}
        more = _read(run / "eval" / f"{arm}_more" / "summary.json")
        rows = _greedy_rows(run, arm)
        out[arm] = {
            "pass1": greedy["pass@1"],
            "pass1_t1": sampled.get("pass@1"),
            "pass8_t1": sampled.get("pass@8"),
            "easy_pass1": easy.get("pass@1"),
            **({"pass1_more": more.get("pass@1"), "more_prompts": more.get("pass@1_prompts")} if more else {}),
            "pass1_by_type": _by_type(rows),
            **_operation_split(rows),
        }
    offline = _read(run / "rft_offline_sample" / "summary.json")
    if offline is not None and "rft_offline" in out:
        out["rft_offline"]["kept_rows"] = offline.get("num_kept")
    seconds: dict[str, float] = {}
    times = run / "times.jsonl"
    if times.exists():
        for line in times.read_text().splitlines():
            row = json.loads(line)
            seconds[row["phase"]] = row["seconds"]
    out["seconds"] = seconds | {"total": sum(seconds.values())}
    return out


def _arms(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-arm dicts of one run's figures (:func:`one_run`), without its ``seconds``."""
    return [a for k, a in run.items() if k != "seconds" and isinstance(a, dict)]


def _stat(values: list[float | None], unit: str) -> str:
    """``mean [min, max]`` of the values that are there; ``unit`` is ``%`` (shown x 100) or `` s``."""
    kept = [v * (100.0 if unit == "%" else 1.0) for v in values if v is not None]
    if not kept:
        return "-"
    mean = sum(kept) / len(kept)
    if len(kept) == 1:
        return f"{mean:.1f}{unit}"
    return f"{mean:.1f}{unit} [{min(kept):.1f}, {max(kept):.1f}]"


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: each arm's figures (mean [min, max] over runs), the gain over the start per run, and times."""
    head = f"mean [min, max] over {len(runs)} runs" if len(runs) > 1 else "one run"
    shown = [f for f in FIGURES if f[0] not in OPTIONAL or any(f[0] in a for r in runs for a in _arms(r))]
    gains_shown = [g for g in GAINS if g[0] in {key for key, _, _ in shown}]
    labels = [label for _, label, _ in shown] + [label for _, label in gains_shown]
    lines = [f"| arm ({head}) | " + " | ".join(labels) + " |", "| --- " * (len(labels) + 1) + "|"]
    for arm, label in ARMS:
        if not any(arm in r for r in runs):
            continue
        cells = [_stat([r.get(arm, {}).get(key) for r in runs], unit) for key, _, unit in shown]
        for key, _ in gains_shown:
            gains = [
                f"{100 * (r[arm][key] - r['start'][key]):+.1f}"
                for r in runs
                if arm in r and r[arm].get(key) is not None and (r.get("start") or {}).get(key) is not None
            ]
            cells.append(", ".join(gains) if arm != "start" else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    types = sorted({t for r in runs for a in _arms(r) for t in a.get("pass1_by_type", {})})
    if types:
        lines += ["", "| greedy pass@1 by type | " + " | ".join(types) + " |", "| --- " * (len(types) + 1) + "|"]
        for arm, _ in ARMS:
            if any(arm in r for r in runs):
                cells = [_stat([r.get(arm, {}).get("pass1_by_type", {}).get(t) for r in runs], "%") for t in types]
                lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    if any("operation_right" in a for r in runs for a in _arms(r)):
        lines += [
            "",
            "| greedy answers | right operation | correct, of those with the right operation |",
            "| --- | --- | --- |",
        ]
        for arm, _ in ARMS:
            if any(arm in r for r in runs):
                cells = [
                    _stat([r.get(arm, {}).get(k) for r in runs], "%")
                    for k in ("operation_right", "correct_given_operation")
                ]
                lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    phases = sorted({p for r in runs for p in r["seconds"]}, key=lambda p: (p == "total", p))
    lines += ["", "| phase | seconds |", "| --- | --- |"]
    lines += [f"| {p} | {_stat([r['seconds'].get(p) for r in runs], ' s')} |" for p in phases]
    return "\n".join(lines)


def plot(run_dirs: list[Path], out: Path) -> Path | None:
    """R1-Zero's figure on this example: per RL arm, the training reward (sampled accuracy) and the mean response
    length per step, one line per run, and the held-out greedy pass@1 at each evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from trainer.metrics import read_metrics

    arms = [a for a in RL_ARMS if any((d / a / "metrics.jsonl").exists() for d in run_dirs)]
    if not arms:
        return None
    panels = [
        ("reward/mean", "sampled accuracy (train, T=1)"),
        ("eval/pass@1", "held-out greedy pass@1"),
        ("completions/mean_length", "mean response length (tokens)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    palette = ("tab:blue", "tab:green", "tab:red", "tab:purple", "tab:orange", "tab:brown", "tab:cyan", "tab:pink")
    colours = dict(zip(RL_ARMS, palette, strict=True))
    for arm in arms:
        for i, d in enumerate(run_dirs):
            path = d / arm
            if not (path / "metrics.jsonl").exists():
                continue
            rows = read_metrics(path)
            for ax, (key, _) in zip(axes, panels, strict=True):
                pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(
                        xs,
                        ys,
                        color=colours[arm],
                        alpha=0.8,
                        marker="o" if key.startswith("eval") else None,
                        markersize=3,
                        label=arm if i == 0 else None,
                    )
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def main(argv: list[str]) -> None:
    run_dirs = [Path(a) for a in argv] or [Path(__file__).parent / "runs"]
    runs = [one_run(d) for d in run_dirs]
    env = environment()
    if len(runs) == 1:
        result: dict[str, Any] = {**runs[0], "environment": env}
        target = run_dirs[0]
    else:
        mean = {
            arm: {key: _mean([r.get(arm, {}).get(key) for r in runs]) for key, _, _ in FIGURES}
            for arm, _ in ARMS
            if any(arm in r for r in runs)
        }
        result = {"mean": mean, "runs": dict(zip(map(str, run_dirs), runs, strict=True)), "environment": env}
        target = run_dirs[0].parent
    text = table(runs) + "\n\n" + json.dumps(env) + "\n"
    (target / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    (target / "summary.md").write_text(text)
    figure = plot(run_dirs, target / "curves.png")
    print(text + (f"\ncurves: {figure}" if figure else ""))


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


if __name__ == "__main__":
    main(sys.argv[1:])
