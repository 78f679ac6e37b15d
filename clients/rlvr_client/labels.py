"""A framework's per-sample label (OpenRLHF's ``labels``, slime's ``label``, verl's ``ground_truth``) as item fields.

Frameworks carry one value per sample besides the prompt and the completion. We read it as:

* a **string that is not a JSON object**: the math ground truth (``"42"``, ``"\\\\frac{1}{2}"``, a GSM8K
  solution ending in ``#### 72``). A set such as ``"{1, 2}"`` is not JSON, so it stays a ground truth.
* a **JSON object** (given as an object, or as a string holding one): item fields, at least one of
  ``ground_truth`` and ``tests``. ``tests`` makes the item ``task: "code"`` unless ``task`` says otherwise.
  Allowed keys: :data:`LABEL_KEYS`.

A number is read as its text (GSM8K's ``72``). Anything else is a :class:`LabelError` that names the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["LABEL_KEYS", "LabelError", "label_fields"]

#: The item fields a JSON label may set.
LABEL_KEYS = frozenset({"ground_truth", "tests", "task", "language", "components", "preset", "num_tokens"})


class LabelError(ValueError):
    """A label that cannot be read; ``key`` is the offending key inside it, or ``None`` for the label itself."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def label_fields(label: Any) -> dict[str, Any]:
    """The item fields a label carries: ``{"ground_truth": ...}`` for a plain answer, else the JSON object's keys.

    Raises:
        LabelError: ``None``, a boolean, a non-finite number, a list, a JSON object with unknown keys or with
            neither ``ground_truth`` nor ``tests``, or ``tests`` with a ``task`` other than ``code``.
    """
    if isinstance(label, str):
        parsed = _json_object(label)
        if parsed is None:
            return {"ground_truth": label}
        label = parsed
    if isinstance(label, bool) or label is None:
        raise LabelError(f"a label must be a ground truth or a JSON object, got {label!r}")
    if isinstance(label, int | float):
        if not math.isfinite(label):
            raise LabelError(f"a numeric label must be finite, got {label!r}")
        return {"ground_truth": str(label)}
    if not isinstance(label, Mapping):
        raise LabelError(f"a label must be a string or a JSON object, got {type(label).__name__}")
    unknown = sorted(set(label) - LABEL_KEYS)
    if unknown:
        raise LabelError(f"unknown key(s) {unknown} in the label; allowed: {sorted(LABEL_KEYS)}", key=unknown[0])
    if "ground_truth" not in label and "tests" not in label:
        raise LabelError("a JSON label needs 'ground_truth' (math) or 'tests' (code)")
    fields = dict(label)
    if "tests" in fields:
        task = fields.setdefault("task", "code")
        if task != "code":
            raise LabelError(f"a label with 'tests' is a code item, but its task is {task!r}", key="task")
    if isinstance(fields.get("ground_truth"), int | float) and not isinstance(fields["ground_truth"], bool):
        fields["ground_truth"] = str(fields["ground_truth"])
    return fields


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` parsed, if it is a JSON object; else ``None`` (a plain ground truth)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
