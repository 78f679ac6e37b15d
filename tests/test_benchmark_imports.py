"""The trainer benchmarks run in a plain environment (``pip install trl`` beside the project, no pytest): importing
them must not pull in the test suite (``benchmarks/trl_step.py`` once failed so, importing a conftest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("module", ["trainer_step", "trl_step", "trl_pair", "distributed_step", "decode_cache"])
def test_the_benchmark_imports_without_pytest(module: str) -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; "  # `import pytest` now raises ImportError
        f"sys.path[:0] = [{str(REPO / 'benchmarks')!r}, {str(REPO)!r}, {str(REPO / 'clients')!r}]; "
        f"import {module}; print(sorted(m for m in sys.modules if m.startswith('tests')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"  # nothing of the test suite was imported


def test_decode_cache_benchmark_runs_and_all_sides_sample_the_same_tokens() -> None:
    # The script exits non-zero if the appending cache, the decode loop or the static-cache loop sampled other tokens
    # than generate with transformers' own cache.
    args = ["--prompts", "2", "--generations", "2", "--completion-length", "70", "--rounds", "1", "--layers", "1"]
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "decode_cache.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "4 rows x 70 tokens" in out.stdout
    lines = [line for line in out.stdout.splitlines() if " s   x" in line]
    assert [line.split("  ")[0] for line in lines] == [
        "generate, DynamicCache",
        "generate, appending cache",
        "decode loop, appending cache",
        "decode loop, static cache",
    ]
    assert "x1.00" in lines[0].split()
    assert all(line.endswith("same tokens 100.0%") for line in lines)
