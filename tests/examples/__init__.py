"""Tests of the examples under ``examples/``: their scripts are loaded from their files, as ``run.sh`` runs them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(example: str, name: str) -> ModuleType:
    """``examples/<example>/<name>.py`` as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"{example}_{name}", EXAMPLES / example / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
