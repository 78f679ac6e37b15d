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
        # A prompt with nothing in it: generate would get zero tokens to condition on.
        ({"prompt": "", "ground_truth": "4"}, "prompt is empty"),
        ({"prompt": " \n", "ground_truth": "4"}, "prompt is empty"),
        ({"prompt": [], "ground_truth": "4"}, "no message with content"),
        ({"prompt": [{"role": "user", "content": ""}], "ground_truth": "4"}, "no message with content"),
        # References that str() would turn into text the verifier reads as something else.
        ({"prompt": "2+2?", "ground_truth": True}, "got True \\(bool\\)"),
        ({"prompt": "2+2?", "ground_truth": float("nan")}, "got nan \\(float\\)"),
        ({"prompt": "2+2?", "ground_truth": ["4"]}, "got \\['4'\\] \\(list\\)"),
        ({"prompt": "2+2?", "ground_truth": "   "}, "needs a non-empty 'ground_truth'"),
        # Wrong types that the server would refuse with a 422 after the first batch was generated.
        ({"prompt": "2+2?", "ground_truth": "4", "components": ["accuracy"]}, "components maps a component"),
        ({"prompt": "2+2?", "ground_truth": "4", "preset": 1}, "preset must be a string"),
        ({"prompt": "2+2?", "ground_truth": "4", "preset": ""}, "preset is empty"),
        ({"prompt": "2+2?", "ground_truth": "4", "language": " "}, "language is empty"),
        ({"prompt": "2+2?", "ground_truth": "4", "language": ["en"]}, "language must be a string"),
        ({"prompt": "f", "task": "code", "tests": [{"input": "1", "output": "1"}]}, "tests must be an object"),
        ({"prompt": "f", "task": "code", "tests": "assert f(1) == 1"}, "tests is a string but not JSON"),
        ({"prompt": "f", "task": "code", "tests": {"type": "stdio", "cases": []}}, "tests has no cases"),
        ({"prompt": "f", "task": "code", "tests": {"type": "assert", "test_list": []}}, "tests has no cases"),
    ],
)
def test_bad_rows_are_refused_with_row_and_field(tmp_path: Path, row: dict[str, object], message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [arithmetic_rows(1)[0], row])
    with pytest.raises(DataError, match=message) as err:
        load_rows(str(path), "train")
    assert str(err.value).startswith(f"{path}:2: "), err.value  # its line, counted from 1 as the score CLI does


def test_rows_are_counted_from_one_in_every_format(tmp_path: Path) -> None:
    # Row 3 lacks its ground truth. In JSONL the message gives the line (a blank line before it counts as a
    # line, not a row); elsewhere, the row counted from 1.
    good, bad = arithmetic_rows(2), {"prompt": "2+2?"}
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in good) + "\n" + json.dumps(bad) + "\n")
    listed = tmp_path / "d.json"
    listed.write_text(json.dumps([*good, bad]))
    for path, where in ((jsonl, f"{jsonl}:4"), (listed, f"{listed} row 3")):
        with pytest.raises(DataError, match="a math row needs") as err:
            load_rows(str(path), "train")
        assert str(err.value).startswith(f"{where}: "), err.value
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([*good, {**bad, "ground_truth": None}]).to_parquet(str(tmp_path / "d.parquet"))
    with pytest.raises(DataError, match="a math row needs") as err:
        load_rows(str(tmp_path / "d.parquet"), "train")
    assert str(err.value).startswith(f"{tmp_path / 'd.parquet'} row 3: "), err.value


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


def test_numbers_as_ground_truth_are_sent_as_their_text(tmp_path: Path) -> None:
    rows = load_rows(
        str(_write(tmp_path / "n.jsonl", [{"prompt": "a", "ground_truth": 42}, {"prompt": "b", "ground_truth": 0.5}])),
        "t",
    )
    items = reward_items(rows, [0, 1], ["x", "y"], [1, 1], "r")
    assert [i.ground_truth for i in items] == ["42", "0.5"]


def test_files_that_are_not_clean_jsonl(tmp_path: Path) -> None:
    row = {"prompt": "caf\u00e9 2+2?", "ground_truth": "4"}
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\r\n\r\n")  # Windows: BOM, CRLF, blank line
    assert load_rows(str(bom), "train") == [row]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"prompt": "caf\u00e9", "ground_truth": "4"}\n'.encode("latin-1"))
    with pytest.raises(DataError, match="is not UTF-8 text"):
        load_rows(str(latin), "train")
    broken = tmp_path / "rows.json"
    broken.write_text('[{"prompt": "a", "ground_truth": "1"},')
    with pytest.raises(DataError, match=r"rows\.json is not valid JSON"):
        load_rows(str(broken), "train")
    with pytest.raises(DataError, match="no such file or directory"):
        load_rows(str(tmp_path / "missing.jsonl"), "train")
    with pytest.raises(DataError, match=r"not a datasets\.save_to_disk one"):
        load_rows(str(tmp_path), "train")


def test_code_tests_stored_as_json_text_are_parsed(tmp_path: Path) -> None:
    tests = {"type": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}]}
    rows = load_rows(
        str(_write(tmp_path / "c.jsonl", [{"prompt": "add", "task": "code", "tests": json.dumps(tests)}])), "t"
    )
    assert rows[0]["tests"] == tests
    assert reward_items(rows, [0], ["print(3)"], [2], "r")[0].tests == tests


def test_a_datasets_table_gets_back_the_rows_it_was_given(tmp_path: Path) -> None:
    """Arrow gives every row every key any row has, as None; the server must see the rows as written."""
    datasets = pytest.importorskip("datasets")
    rows = [
        {
            "prompt": [{"role": "user", "content": "Add the two numbers."}],
            "task": "code",
            "ground_truth": None,
            "tests": {"type": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}], "comparator": "exact"},
            "components": {"accuracy": 1.0, "format": 0.5},
        },
        {
            "prompt": [{"role": "user", "content": "What is 2+2?"}],
            "task": "math",
            "ground_truth": "4",
            "tests": None,
            "components": {"accuracy": 1.0},
        },
    ]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    loaded = load_rows(str(tmp_path / "ds"), "train")
    assert datasets.load_from_disk(str(tmp_path / "ds"))["train"][1]["components"] == {"accuracy": 1.0, "format": None}
    assert loaded[0]["tests"] == rows[0]["tests"]
    assert loaded[1]["components"] == {"accuracy": 1.0}  # not {"format": None}, which the server refuses
    assert loaded[1].get("tests") is None
    items = reward_items(loaded, [0, 1], ["x", "y"], [1, 1], "r")
    assert items[1].to_json()["components"] == {"accuracy": 1.0}


def test_parquet_and_csv_files_load(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(arithmetic_rows(3)).to_parquet(str(tmp_path / "a.parquet"))
    assert load_rows(str(tmp_path / "a.parquet"), "train") == arithmetic_rows(3)
    (tmp_path / "a.csv").write_text("prompt,ground_truth\nWhat is 1 plus 2?,3\n")
    assert load_rows(str(tmp_path / "a.csv"), "train") == [{"prompt": "What is 1 plus 2?", "ground_truth": 3}]
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(DataError, match=r"unknown file type '\.txt'"):
        load_rows(str(tmp_path / "a.txt"), "train")


def test_reward_items_carry_the_truncated_flag() -> None:
    """The rollout's ``is_truncated`` goes on each item; only true flags go on the wire (issue 23)."""
    rows = [{"prompt": "p", "ground_truth": "1"}]
    items = reward_items(rows, [0, 0], ["x", "y"], [4, 2], "r", truncated=[True, False])
    assert [it.truncated for it in items] == [True, False]
    assert items[0].to_json()["truncated"] is True and "truncated" not in items[1].to_json()
    assert [it.truncated for it in reward_items(rows, [0], ["x"], [1], "r")] == [False]
    with pytest.raises(ValueError, match="truncated has 1 flags for 2 completions"):
        reward_items(rows, [0, 0], ["x", "y"], [1, 1], "r", truncated=[True])
