"""``benchmarks/trl_step.py`` runs to its figure where pytest cannot be imported, as in a plain ``pip install trl``
environment (issue 22 D7: it once imported ``tests/trainer/conftest.py``). ``tests/test_benchmark_imports.py``
checks the import alone, where TRL is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RUN = """
import runpy, sys
sys.modules["pytest"] = None  # `import pytest` raises ImportError from here on
sys.argv = ["trl_step.py", *sys.argv[1:]]
runpy.run_path("benchmarks/trl_step.py", run_name="__main__")
print("test-suite modules:", sorted(m for m in sys.modules if m.split(".")[0] in ("tests", "conftest")))
"""


def test_trl_step_runs_without_pytest() -> None:
    shape = ["--steps", "2", "--prompts", "2", "--generations", "4", "--completion-length", "8"]
    tiny = ["--hidden-size", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "clients")}
    out = subprocess.run(
        [sys.executable, "-c", RUN, *shape, *tiny], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "GRPOTrainer: " in out.stdout and "2 prompts x 4 completions of <= 8 tokens" in out.stdout
    assert "test-suite modules: []" in out.stdout


def test_trl_pair_times_both_sides_with_the_same_shape(tmp_path: Path) -> None:
    """``benchmarks/trl_pair.py`` runs our step and TRL's in turn with one shape (here with a KL term and two
    iterations, so TRL's optimizer steps are summed per generation batch) and reports TRL's time over ours."""
    shape = ["--steps", "1", "--prompts", "2", "--generations", "4", "--completion-length", "8"]
    tiny = ["--hidden-size", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1"]
    summary_file = tmp_path / "pair.json"
    args = ["--rounds", "1", "--beta", "0.04", "--num-iterations", "2", *shape, *tiny, "--json", str(summary_file)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "clients")}
    out = subprocess.run(
        [sys.executable, "benchmarks/trl_pair.py", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(summary_file.read_text())
    assert summary["shape"] == ["--beta", "0.04", "--num-iterations", "2", *shape, *tiny]
    assert summary["ours_step_s"] > 0 and summary["trl_step_s"] > 0
    assert summary["trl_over_ours"] == summary["trl_step_s"] / summary["ours_step_s"]
    assert f"TRL / ours x{summary['trl_over_ours']:.2f}" in out.stdout
