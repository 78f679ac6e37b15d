"""Shared test fixtures: where the benchmark data lives, and whether we are in CI."""

from __future__ import annotations

import os
from pathlib import Path

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


def require_file(path: Path) -> Path:
    """Return ``path``; skip the test where it is missing, except in CI where that is a failure."""
    if not path.exists():
        reason = f"{path} is missing: set RLVR_DATA_DIR / RLVR_CASES_DIR to the shared data folder"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return require_file(data_dir())


@pytest.fixture(scope="session")
def shared_cases() -> Path:
    return require_file(cases_dir())
