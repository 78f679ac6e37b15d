"""The arithmetic recipe's figures: held-out pass@1 after each phase, the rejection-sampling figures and the time of
each phase, for one run or as mean and range over several (seeds).

    python examples/arithmetic/summary.py examples/arithmetic/runs                 # one run: writes summary.json/.md
    python examples/arithmetic/summary.py runs/seed0 runs/seed1 runs/seed2         # mean [min, max] over the runs

Each run directory is what ``run.sh`` wrote (``eval/<phase>/summary.json``, ``sample/summary.json``,
``times.jsonl``). The library versions, the CPU and the load average are recorded with the figures.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: (phase, what the held-out pass@1 measures), in the recipe's order.
EVALS = [
    ("sft", "1. cold-start SFT"),
    ("grpo", "2. GRPO (outcome)"),
    ("sft2", "4. SFT of the base on the cold-start and kept rows"),
    ("grpo2", "5. GRPO again"),
    ("grpo_process", "6. = 2. with process supervision"),
]
PHASES = ["prepare", "sft", "grpo", "sample", "sft2", "grpo2", "grpo_process"]


def environment() -> dict[str, Any]:
    """Library versions, CPU and load: what a figure depends on."""
    cpu = platform.processor() or platform.machine()
    with_model = Path("/proc/cpuinfo")
    if with_model.exists():
        names = [line.split(":", 1)[1].strip() for line in with_model.read_text().splitlines() if "model name" in line]
        cpu = f"{names[0]} x {len(names)}" if names else cpu
    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers", "tokenizers", "math-verify"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"python": platform.python_version(), **versions, "cpu": cpu, "load_average": list(os.getloadavg())}


def one_run(run: Path) -> dict[str, Any]:
    """The figures of one ``run.sh`` output directory."""
    out: dict[str, Any] = {"run": str(run)}
    for phase, _ in EVALS:
        path = run / "eval" / phase / "summary.json"
        out[f"pass@1/{phase}"] = json.loads(path.read_text())["pass@1"] if path.exists() else None
    sample = run / "sample" / "summary.json"
    if sample.exists():
        s = json.loads(sample.read_text())
        out.update({"sample/pass@1": s["pass@1"], "sample/pass@8": s.get("pass@8"), "sample/kept": s["num_kept"]})
        out["sample/kept_fraction"] = s["kept_fraction"]
    times = run / "times.jsonl"
    seconds = {}
    if times.exists():
        for line in times.read_text().splitlines():
            row = json.loads(line)
            seconds[row["phase"]] = row["seconds"]
    for phase in PHASES:  # a phase's time includes its held-out evaluation
        if phase in seconds:
            out[f"seconds/{phase}"] = seconds[phase] + seconds.get(f"eval_{phase}", 0)
    out["seconds/total"] = sum(seconds.values())
    return out


def _stat(values: list[float | None], unit: str) -> str:
    """``mean [min, max]`` of the values that are there; ``unit`` is ``%`` (shown x 100), `` s`` or ``""``."""
    kept = [v * (100.0 if unit == "%" else 1.0) for v in values if v is not None]
    if not kept:
        return "-"
    digits = 0 if unit == "" else 1
    mean = sum(kept) / len(kept)
    if len(kept) == 1:
        return f"{mean:.{digits}f}{unit}"
    return f"{mean:.{digits}f}{unit} [{min(kept):.{digits}f}, {max(kept):.{digits}f}]"


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: pass@1 after each phase, the sampling figures and the phase times, mean [min, max] over runs."""
    n = len(runs)
    head = f"over {n} runs, mean [min, max]" if n > 1 else "one run"
    lines = [f"| held-out pass@1 (greedy, 200 problems), {head} | |", "| --- | --- |"]
    for phase, label in EVALS:
        lines.append(f"| {label} | {_stat([r.get(f'pass@1/{phase}') for r in runs], '%')} |")
    lines += ["", "| rejection sampling (phase 3) | |", "| --- | --- |"]
    for key, label, unit in (
        ("sample/pass@1", "pass@1 (temperature 1)", "%"),
        ("sample/pass@8", "pass@8", "%"),
        ("sample/kept_fraction", "kept fraction", "%"),
        ("sample/kept", "rows kept", ""),
    ):
        lines.append(f"| {label} | {_stat([r.get(key) for r in runs], unit)} |")
    lines += ["", "| phase | seconds |", "| --- | --- |"]
    for phase in [*PHASES, "total"]:
        lines.append(f"| {phase} | {_stat([r.get(f'seconds/{phase}') for r in runs], ' s')} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    runs_dirs = [Path(a) for a in argv] or [Path(__file__).parent / "runs"]
    runs = [one_run(d) for d in runs_dirs]
    result = {"runs": runs, "environment": environment()}
    text = table(runs) + "\n\n" + json.dumps(result["environment"]) + "\n"
    target = runs_dirs[0] if len(runs_dirs) == 1 else runs_dirs[0].parent
    (target / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    (target / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
