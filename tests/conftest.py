"""Shared test fixtures: where the benchmark data lives, and whether we are in CI."""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
CLIENTS_DIR = REPO_ROOT / "clients"
#: PYTHONPATH for a process a test starts from this checkout: the server's packages and the light client's.
CHILD_PYTHONPATH = os.pathsep.join((str(REPO_ROOT), str(CLIENTS_DIR)))

# The light client (clients/rlvr_client) is a second distribution: pytest's `pythonpath` finds it for this
# process, and processes the tests start (`python -m trainer`) find it through PYTHONPATH, even where the
# editable install predates it.
if str(CLIENTS_DIR) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(CLIENTS_DIR)) if p)


def data_dir() -> Path:
    """The shared data folder: ``RLVR_DATA_DIR``, else ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("RLVR_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


def cases_dir() -> Path:
    """The peer-failure cases: ``RLVR_CASES_DIR``, else ``../shared/cases``."""
    return Path(os.environ.get("RLVR_CASES_DIR", REPO_ROOT.parent / "shared" / "cases"))


def _missing(path: Path) -> str:
    variable = "RLVR_CASES_DIR" if path.is_relative_to(cases_dir()) else "RLVR_DATA_DIR"
    folder = "cases" if variable == "RLVR_CASES_DIR" else "data"
    return f"{path} is missing: set {variable} to the shared {folder} folder (shared/{folder} of the project)"


def require_file(path: Path) -> Path:
    """Return ``path``; skip the test where it is missing, except in CI where that is a failure."""
    if not path.exists():
        if IN_CI:
            pytest.fail(_missing(path))
        pytest.skip(_missing(path))
    return path


def cases_or_placeholder(cases: list[dict], name: str) -> list:
    """Parameters for a test over the shared cases of ``name``: the cases, or where the file is missing one
    placeholder that skips naming the variable to set (pytest alone says only "got empty parameter set").
    Under ``CI=true`` there is no placeholder: the file's own presence test fails instead."""
    path = cases_dir() / name
    if cases or IN_CI or path.exists():
        return cases
    return [pytest.param(None, id="missing", marks=pytest.mark.skip(reason=_missing(path)))]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return require_file(data_dir())


@pytest.fixture(scope="session")
def shared_cases() -> Path:
    return require_file(cases_dir())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``vllm`` need vLLM (the ``vllm`` extra, its own virtual environment): where it is not installed
    they are deselected, not skipped; .ci/run runs them in the vLLM environment with ``pytest -m vllm``."""
    if importlib.util.find_spec("vllm") is not None:
        return
    deselected = [item for item in items if item.get_closest_marker("vllm")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("vllm")]


#: Longest skip reason printed in the end-of-run summary (a reason can quote a whole path or command).
_REASON_CHARS = 200


def skip_summary(reasons: list[str]) -> list[str]:
    """The end-of-run lines for skipped tests: one per distinct reason, the most frequent first, each with its
    count (``"skipped 12: docker is not running ..."``)."""
    counts = Counter(r if len(r) <= _REASON_CHARS else r[: _REASON_CHARS - 3] + "..." for r in reasons)
    return [f"skipped {n}: {reason}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> Iterator[None]:
    """Say at the end of the run what was skipped and why: pytest's closing line gives only a count, and 325
    skipped tests (Docker absent) read like a pass. The outermost wrapper, so these lines come after ``-ra``'s
    one line per skipped location, just above the closing line."""
    yield
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)]
    if not skipped:
        return
    terminalreporter.write_sep("-", f"{len(skipped)} skipped, by reason")
    for line in skip_summary([_skip_reason(r) for r in skipped]):
        terminalreporter.write_line(line)
