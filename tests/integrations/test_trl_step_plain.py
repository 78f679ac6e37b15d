"""``benchmarks/trl_step.py`` runs to its figure where pytest cannot be imported, as in a plain ``pip install trl``
environment (issue 22 D7: it once imported ``tests/trainer/conftest.py``). ``tests/test_benchmark_imports.py``
checks the import alone, where TRL is not installed."""

from __future__ import annotations

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
