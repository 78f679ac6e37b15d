"""Prompt data: loading (JSONL or ``datasets``), row checks, the per-step prompt order, and reward items.

A row holds a prompt (a string or chat messages, in ``prompt_column``) and what its reward items need:
``task`` (default ``math``), ``ground_truth``, ``tests``, ``language``, ``components`` (weights that override
the run's), ``preset``. Other columns are ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr_client.protocol import RewardItem
from trainer.config import names_a_local_path

TASKS = ("math", "code")
TEST_TYPES = ("stdio", "assert", "call")


class DataError(ValueError):
    """A data file or row is unusable; the message names the file, row and field."""


def load_rows(source: str, split: str, prompt_column: str = "prompt") -> list[dict[str, Any]]:
    """Read prompt rows from a ``.jsonl``/``.json`` file, a ``.parquet``/``.csv`` file, a ``datasets.save_to_disk``
    directory or a hub dataset.

    Every row is checked and normalised with :func:`check_row`, so a bad row fails here, before any training.

    Raises:
        DataError: no such file, unreadable file, empty data, or a bad row.
    """
    return load_named_rows(source, split, prompt_column)[0]


def load_named_rows(source: str, split: str, prompt_column: str = "prompt") -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`load_rows`, with where each row is, for messages: ``data.jsonl:3`` (its line, as the ``score`` CLI
    says it) or ``data.parquet row 3`` (counted from 1).

    Raises:
        DataError: as :func:`load_rows`.
    """
    rows, names = read_named_rows(source, split)
    return [check_row(row, prompt_column, where=where) for row, where in zip(rows, names, strict=True)], names


def read_rows(source: str, split: str) -> list[dict[str, Any]]:
    """The rows of ``source`` as plain dicts, unchecked (formats as :func:`load_rows`; ``sft`` checks its own).

    Raises:
        DataError: no such file, an unreadable file, or no rows.
    """
    return read_named_rows(source, split)[0]


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def read_named_rows(source: str, split: str) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`read_rows`, with where each row is: ``data.jsonl:3`` (its line) or ``data.parquet row 3`` (from 1).

    Raises:
        DataError: no such file, an unreadable file, or no rows.
    """
    path = Path(source)
    if path.is_file() and path.suffix in (".jsonl", ".ndjson", ""):
        numbered = _read_json_lines(path)
        rows, names = [row for _, row in numbered], [f"{source}:{n}" for n, _ in numbered]
    else:
        rows = (
            _read_json_list(path) if path.is_file() and path.suffix == ".json" else _read_dataset(source, path, split)
        )
        names = [f"{source} row {i}" for i in range(1, len(rows) + 1)]
    if not rows:
        raise DataError(f"{source} holds no rows")
    return rows, names


def _read_dataset(source: str, path: Path, split: str) -> list[dict[str, Any]]:
    import datasets  # imported here: loading it costs a second and only this branch needs it

    if path.is_file():
        builders = {".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
        if path.suffix not in builders:
            raise DataError(f"{source}: unknown file type {path.suffix!r}; use .jsonl, .json, .parquet or .csv")
        data = datasets.load_dataset(builders[path.suffix], data_files=str(path), split="train")
    elif path.is_dir():
        try:
            data = datasets.load_from_disk(str(path))
        except FileNotFoundError as exc:
            raise DataError(f"{source} is a directory but not a datasets.save_to_disk one ({exc})") from exc
    elif path.suffix or names_a_local_path(source):
        # It names a file that is not there; asking the hub for it would only give a confusing error.
        raise DataError(f"{source}: no such file or directory")
    else:
        try:
            data = datasets.load_dataset(source, split=split)
        except (FileNotFoundError, ValueError, ConnectionError) as exc:
            raise DataError(f"{source}: not a local file and not loadable from the hub ({exc})") from exc
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise DataError(f"{source} has splits {list(data)}, not {split!r}; set the split option")
        data = data[split]
    return [dict(r) for r in data]


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # -sig: files written on Windows start with a BOM
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataError(f"{path} must hold a JSON list of row objects (or use .jsonl, one object a line)")
    return data


def _read_json_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Each row of a JSONL file with its line number (from 1; blank lines are skipped, not counted as rows)."""
    rows = []
    for n, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{n} is not valid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise DataError(f"{path}:{n} must be a JSON object, got {type(row).__name__}")
        rows.append((n, row))
    return rows


def check_row(row: Mapping[str, Any], prompt_column: str, *, where: str) -> dict[str, Any]:
    """Refuse a row the trainer cannot use; return it with what the reward server needs normalised.

    Normalised: ``tests`` given as a JSON string (as many hub datasets store them) is parsed, and ``None`` values
    that a ``datasets`` table adds for keys other rows have (``{"comparator": None}``) are dropped from ``tests``
    and ``components``, so the server sees what the row meant.

    Raises:
        DataError: no prompt or an empty one, a malformed chat prompt, an unknown task, a math row without a
            usable ``ground_truth`` (a non-empty string or a finite number), a code row without test cases, or a
            ``components``/``preset``/``language`` of the wrong type. The message names the row and the field.
    """
    if prompt_column not in row:
        raise DataError(f"{where}: no {prompt_column!r} column (columns: {sorted(row)}); set prompt_column")
    out = dict(row)
    prompt = row[prompt_column]
    if isinstance(prompt, list):
        for m in prompt:
            if not (isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise DataError(f"{where}: chat prompts are lists of {{'role': str, 'content': str}}, got {m!r:.100}")
        if not any(m["content"].strip() for m in prompt):
            raise DataError(f"{where}: the chat prompt has no message with content")
    elif not isinstance(prompt, str):
        raise DataError(f"{where}: {prompt_column} must be a string or chat messages, got {type(prompt).__name__}")
    elif not prompt.strip():
        raise DataError(f"{where}: {prompt_column} is empty")
    task = row.get("task") or "math"
    if task not in TASKS:
        raise DataError(f"{where}: task must be one of {TASKS}, got {task!r}")
    truth = row.get("ground_truth")
    if truth is not None and not _usable_truth(truth):
        raise DataError(
            f"{where}: a row needs a non-empty 'ground_truth' that is a string or a finite number, got "
            f"{truth!r:.100} ({type(truth).__name__})"
        )
    if task == "math" and truth is None:
        raise DataError(f"{where}: a math row needs a non-empty 'ground_truth'")
    if task == "code" or row.get("tests") is not None:
        out["tests"] = _check_tests(row.get("tests"), where)
    components = row.get("components")
    if components is not None:
        if not isinstance(components, Mapping) or not all(isinstance(k, str) for k in components):
            raise DataError(f"{where}: components maps a component name to a weight, got {components!r:.100}")
        out["components"] = {k: v for k, v in components.items() if v is not None} or None
    for name in ("preset", "language"):
        if row.get(name) is not None and not isinstance(row[name], str):
            raise DataError(f"{where}: {name} must be a string, got {row[name]!r:.100}")
        if isinstance(row.get(name), str) and not row[name].strip():  # the server refuses it mid-run otherwise
            raise DataError(f"{where}: {name} is empty; leave it out or set it to null for none")
    return out


def _usable_truth(truth: Any) -> bool:
    if isinstance(truth, bool):  # a bool is an int to Python, but True is no reference answer
        return False
    if isinstance(truth, int):
        return True
    if isinstance(truth, float):
        return math.isfinite(truth)
    return isinstance(truth, str) and bool(truth.strip())


def _check_tests(tests: Any, where: str) -> dict[str, Any]:
    """A code row's ``tests`` as the server takes them: ``{"type": "stdio"|"assert"|"call", ...}`` with cases."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: tests is a string but not JSON ({exc})") from exc
    if tests is None:
        raise DataError(f"{where}: a code row needs 'tests'")
    if not isinstance(tests, Mapping) or tests.get("type") not in TEST_TYPES:
        raise DataError(f"{where}: tests must be an object with 'type' one of {TEST_TYPES}, got {tests!r:.100}")
    tests = {k: v for k, v in tests.items() if v is not None}
    has_cases = tests.get("cases") if tests["type"] != "assert" else tests.get("test") or tests.get("test_list")
    if not has_cases:
        raise DataError(f"{where}: tests has no cases; every completion would be unscoreable")
    return tests


def prompt_indices(step: int, batch_size: int, num_rows: int, seed: int) -> list[int]:
    """Row indices of the prompts for training step ``step`` (0-based): :func:`indices_from` position
    ``step * batch_size``.

    Rows are visited epoch by epoch, each epoch in a fresh permutation seeded by ``(seed, epoch)``; a batch that
    crosses an epoch boundary takes the rest of one and the start of the next. The order depends only on the
    arguments, so a resumed run sees exactly the prompts an uninterrupted one would.
    """
    return indices_from(step * batch_size, batch_size, num_rows, seed)


def indices_from(position: int, count: int, num_rows: int, seed: int) -> list[int]:
    """``count`` row indices from ``position`` on in the run's prompt order (a permutation per epoch, seeded by
    ``(seed, epoch)``). Dynamic sampling draws its extra prompts from here, continuing where the step left off."""
    out: list[int] = []
    while len(out) < count:
        epoch, offset = divmod(position, num_rows)
        perm = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
        take = min(count - len(out), num_rows - offset)
        out.extend(perm[offset : offset + take])
        position += take
    return out


def reward_item(
    row: Mapping[str, Any],
    *,
    item_id: str,
    group_id: str,
    completion: str,
    num_tokens: int,
    prompt_column: str,
    steps: Mapping[str, Any] | None = None,
    truncated: bool = False,
) -> RewardItem:
    """The :class:`RewardItem` that scores ``completion`` of ``row`` (asking for step rewards with ``steps``);
    ``truncated``: the completion hit ``max_completion_length`` without EOS."""
    truth = row.get("ground_truth")
    prompt = row.get(prompt_column)
    if isinstance(prompt, list):  # chat messages: the last user turn is what the language check needs
        prompt = next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), None)
    return RewardItem(
        id=item_id,
        task=row.get("task") or "math",
        response=completion,
        ground_truth=None if truth is None else str(truth),
        components=row.get("components"),
        preset=row.get("preset"),
        language=row.get("language"),
        num_tokens=num_tokens,
        tests=row.get("tests"),
        group_id=group_id,
        prompt=prompt,
        steps=steps,
        truncated=truncated,
    )


def reward_items(
    rows: Sequence[Mapping[str, Any]],
    prompt_index: Sequence[int],
    texts: Sequence[str],
    lengths: Sequence[int],
    id_prefix: str,
    prompt_column: str = "prompt",
    steps: Mapping[str, Any] | None = None,
    truncated: Sequence[bool] | None = None,
) -> list[RewardItem]:
    """One item per completion; ids are ``{id_prefix}-p{prompt}-c{completion}`` (stable across retries) and the
    group id is ``{id_prefix}-p{prompt}``. ``truncated`` (one per completion, the rollout's ``is_truncated``)
    marks those cut at the length limit: only an explicit final answer counts for them (issue 23)."""
    cut = [False] * len(texts) if truncated is None else [bool(t) for t in truncated]
    if len(cut) != len(texts):
        raise ValueError(f"truncated has {len(cut)} flags for {len(texts)} completions")
    return [
        reward_item(
            rows[p],
            item_id=f"{id_prefix}-p{p}-c{j}",
            group_id=f"{id_prefix}-p{p}",
            completion=text,
            num_tokens=int(n),
            prompt_column=prompt_column,
            steps=steps,
            truncated=t,
        )
        for j, (p, text, n, t) in enumerate(zip(prompt_index, texts, lengths, cut, strict=True))
    ]
