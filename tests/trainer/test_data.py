"""Prompt data: loading, row checks, the per-step order, reward items."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.trainer.conftest import arithmetic_rows
from trainer.data import DataError, load_rows, prompt_indices, reward_items


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_rows_load(tmp_path: Path) -> None:
    rows = arithmetic_rows(3)
    assert load_rows(str(_write(tmp_path / "a.jsonl", rows)), "train") == rows


def test_datasets_directory_loads_with_its_split(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    data = datasets.DatasetDict({"train": datasets.Dataset.from_list(arithmetic_rows(4))})
    data.save_to_disk(str(tmp_path / "ds"))
    assert load_rows(str(tmp_path / "ds"), "train") == arithmetic_rows(4)
    with pytest.raises(DataError, match="splits"):
        load_rows(str(tmp_path / "ds"), "validation")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "2+2?", "ground_truth": "4"}, "no 'prompt' column"),
        ({"prompt": 42, "ground_truth": "4"}, "string or chat messages"),
        ({"prompt": [{"role": "user"}], "ground_truth": "4"}, "chat prompts"),
        ({"prompt": "2+2?"}, "needs a non-empty 'ground_truth'"),
        ({"prompt": "2+2?", "ground_truth": ""}, "needs a non-empty 'ground_truth'"),
        ({"prompt": "2+2?", "task": "poetry", "ground_truth": "4"}, "task must be one of"),
        ({"prompt": "write f", "task": "code"}, "needs 'tests'"),
    ],
)
def test_bad_rows_are_refused_with_row_and_field(tmp_path: Path, row: dict[str, object], message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [arithmetic_rows(1)[0], row])
    with pytest.raises(DataError, match=message) as err:
        load_rows(str(path), "train")
    assert "row 1" in str(err.value)


def test_chat_prompts_are_accepted(tmp_path: Path) -> None:
    row = {"prompt": [{"role": "user", "content": "2+2?"}], "ground_truth": "4"}
    assert load_rows(str(_write(tmp_path / "chat.jsonl", [row])), "train") == [row]


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "a", "ground_truth": "1"}\n{"prompt": \n')
    with pytest.raises(DataError, match=r"broken\.jsonl:2"):
        load_rows(str(path), "train")


@pytest.mark.parametrize(("num_rows", "batch"), [(10, 4), (7, 7), (5, 3), (3, 8)])
def test_each_epoch_visits_every_row_once(num_rows: int, batch: int) -> None:
    # num_rows steps of `batch` prompts are exactly `batch` epochs, whether or not batch divides num_rows.
    seen = Counter(i for step in range(num_rows) for i in prompt_indices(step, batch, num_rows, seed=1))
    assert seen == Counter(dict.fromkeys(range(num_rows), batch))
    first_epoch = [i for s in range(num_rows) for i in prompt_indices(s, 1, num_rows, seed=1)]
    assert sorted(first_epoch) == list(range(num_rows))


def test_prompt_order_depends_only_on_step_and_seed() -> None:
    assert prompt_indices(5, 4, 10, seed=3) == prompt_indices(5, 4, 10, seed=3)
    assert [prompt_indices(s, 4, 100, seed=3) for s in range(3)] != [
        prompt_indices(s, 4, 100, seed=4) for s in range(3)
    ]


def test_reward_items_carry_row_fields_and_stable_ids() -> None:
    rows = [
        {"prompt": "a", "ground_truth": 7, "language": "en", "components": {"accuracy": 1.0, "format": 0.5}},
        {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}], "task": "code", "tests": {}},
    ]
    items = reward_items(rows, [0, 0, 1], ["x", "y", "z"], [3, 1, 2], "run-s4")
    assert [i.id for i in items] == ["run-s4-p0-c0", "run-s4-p0-c1", "run-s4-p1-c2"]
    assert items[0].to_json() == {
        "id": "run-s4-p0-c0",
        "task": "math",
        "response": "x",
        "ground_truth": "7",
        "language": "en",
        "num_tokens": 3,
        "components": {"accuracy": 1.0, "format": 0.5},
        "group_id": "run-s4-p0",
        "prompt": "a",
    }
    assert (items[2].task, items[2].tests, items[2].prompt) == ("code", {}, "b")  # the last user turn
