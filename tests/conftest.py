"""Shared test fixtures: where the benchmark data lives, and whether we are in CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


def data_dir() -> Path:
    """The shared data folder: ``RLVR_DATA_DIR``, else ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("RLVR_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


def cases_dir() -> Path:
    """The peer-failure cases: ``RLVR_CASES_DIR``, else ``../shared/cases``."""
    return Path(os.environ.get("RLVR_CASES_DIR", REPO_ROOT.parent / "shared" / "cases"))


def require_file(path: Path) -> Path:
    """Return ``path``; skip the test where it is missing, except in CI where that is a failure."""
    if not path.exists():
        variable = "RLVR_CASES_DIR" if path.is_relative_to(cases_dir()) else "RLVR_DATA_DIR"
        folder = "cases" if variable == "RLVR_CASES_DIR" else "data"
        reason = f"{path} is missing: set {variable} to the shared {folder} folder (shared/{folder} of the project)"
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
