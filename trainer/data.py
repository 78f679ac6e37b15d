"""Prompt data: loading (JSONL or ``datasets``), row checks, the per-step prompt order, and reward items.

A row holds a prompt (a string or chat messages, in ``prompt_column``) and what its reward items need:
``task`` (default ``math``), ``ground_truth``, ``tests``, ``language``, ``components`` (weights that override
the run's), ``preset``. Other columns are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from reward_server.client import RewardItem

TASKS = ("math", "code")


class DataError(ValueError):
    """A data file or row is unusable; the message names the file, row and field."""


def load_rows(source: str, split: str, prompt_column: str = "prompt") -> list[dict[str, Any]]:
    """Read prompt rows from a ``.jsonl``/``.json`` file, a ``datasets.save_to_disk`` directory or a hub dataset.

    Every row is checked with :func:`check_row`, so a bad row fails here, before any training.

    Raises:
        DataError: unreadable file, empty data, or a bad row.
    """
    path = Path(source)
    if path.is_file():
        rows = _read_json_rows(path)
    else:
        import datasets  # imported here: loading it costs a second and only this branch needs it

        data = datasets.load_from_disk(str(path)) if path.is_dir() else datasets.load_dataset(source, split=split)
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise DataError(f"{source} has splits {list(data)}, not {split!r}; set the split option")
            data = data[split]
        rows = [dict(r) for r in data]
    if not rows:
        raise DataError(f"{source} holds no rows")
    for i, row in enumerate(rows):
        check_row(row, prompt_column, where=f"{source} row {i}")
    return rows


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise DataError(f"{path} must hold a JSON list of rows")
        return data
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{n} is not valid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise DataError(f"{path}:{n} must be a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def check_row(row: Mapping[str, Any], prompt_column: str, *, where: str) -> None:
    """Refuse a row the trainer cannot use.

    Raises:
        DataError: no prompt, a malformed chat prompt, an unknown task, or a math row without ``ground_truth``.
    """
    if prompt_column not in row:
        raise DataError(f"{where} has no {prompt_column!r} column (columns: {sorted(row)}); set prompt_column")
    prompt = row[prompt_column]
    if isinstance(prompt, list):
        for m in prompt:
            if not (isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise DataError(f"{where}: chat prompts are lists of {{'role': str, 'content': str}}, got {m!r:.100}")
    elif not isinstance(prompt, str):
        raise DataError(f"{where}: {prompt_column} must be a string or chat messages, got {type(prompt).__name__}")
    task = row.get("task") or "math"
    if task not in TASKS:
        raise DataError(f"{where}: task must be one of {TASKS}, got {task!r}")
    if task == "math" and row.get("ground_truth") in (None, ""):
        raise DataError(f"{where}: a math row needs a non-empty 'ground_truth'")
    if task == "code" and row.get("tests") is None:
        raise DataError(f"{where}: a code row needs 'tests'")


def prompt_indices(step: int, batch_size: int, num_rows: int, seed: int) -> list[int]:
    """Row indices of the prompts for training step ``step`` (0-based).

    Rows are visited epoch by epoch, each epoch in a fresh permutation seeded by ``(seed, epoch)``; a batch that
    crosses an epoch boundary takes the rest of one and the start of the next. The order depends only on the
    arguments, so a resumed run sees exactly the prompts an uninterrupted one would.
    """
    out: list[int] = []
    position = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(position, num_rows)
        perm = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
        take = min(batch_size - len(out), num_rows - offset)
        out.extend(perm[offset : offset + take])
        position += take
    return out


def reward_item(
    row: Mapping[str, Any], *, item_id: str, group_id: str, completion: str, num_tokens: int, prompt_column: str
) -> RewardItem:
    """The :class:`RewardItem` that scores ``completion`` of ``row``."""
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
    )


def reward_items(
    rows: Sequence[Mapping[str, Any]],
    prompt_index: Sequence[int],
    texts: Sequence[str],
    lengths: Sequence[int],
    id_prefix: str,
    prompt_column: str = "prompt",
) -> list[RewardItem]:
    """One item per completion; ids are ``{id_prefix}-p{prompt}-c{completion}`` (stable across retries) and the
    group id is ``{id_prefix}-p{prompt}``."""
    return [
        reward_item(
            rows[p],
            item_id=f"{id_prefix}-p{p}-c{j}",
            group_id=f"{id_prefix}-p{p}",
            completion=text,
            num_tokens=int(n),
            prompt_column=prompt_column,
        )
        for j, (p, text, n) in enumerate(zip(prompt_index, texts, lengths, strict=True))
    ]
