"""The command line on inputs a user gets wrong: each ends with one message and an exit code, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainer.__main__ import app
from trainer.metrics import read_metrics
from trainer.tiny import build_tokenizer


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_help_lists_the_commands() -> None:
    code, out = _invoke("--help")
    assert code == 0
    assert all(name in out for name in ("train", "plot", "fields"))
    code, out = _invoke("train", "--help")
    assert code == 0 and "--config" in out and "--set" in out


def test_plot_of_a_run_that_has_not_logged_yet(tmp_path: Path) -> None:
    code, out = _invoke("plot", str(tmp_path))
    assert code == 1
    assert "metrics.jsonl not found" in out
    (tmp_path / "metrics.jsonl").write_text("")
    code, out = _invoke("plot", str(tmp_path))
    assert code == 1
    assert "holds no step yet" in out


def test_plot_skips_a_line_cut_short_by_a_crash(tmp_path: Path) -> None:
    rows = [{"step": 1, "reward/mean": 0.25}, {"step": 2, "reward/mean": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "rew')
    assert read_metrics(tmp_path) == rows
    code, out = _invoke("plot", str(tmp_path))
    assert code == 0
    assert out.strip().endswith("curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_of_a_metric_that_was_not_logged(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    code, out = _invoke("plot", str(tmp_path), "--metric", "eval/pass@1")
    assert code == 1
    assert "none of the metrics ['eval/pass@1']" in out


@pytest.mark.parametrize(
    ("train_data", "expected"),
    [
        ("missing.jsonl", "data error: missing.jsonl: no such file or directory"),
        ("empty.jsonl", "data error: empty.jsonl holds no rows"),
        ("nogt.jsonl", "data error: nogt.jsonl:1: a math row needs a non-empty 'ground_truth'"),
    ],
)
def test_train_reports_data_errors_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train_data: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("empty.jsonl").write_text("\n")
    Path("nogt.jsonl").write_text(json.dumps({"prompt": "2+2?"}) + "\n")
    Path("c.yaml").write_text(f"model_name_or_path: no-such-model\ntrain_data: {train_data}\n")
    code, out = _invoke("train", "--config", "c.yaml")
    assert code == 1
    assert expected in out


def test_train_reports_a_model_that_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(json.dumps({"prompt": "2+2?", "ground_truth": "4"}) + "\n")
    Path("model").mkdir()  # a directory without config.json or tokenizer files
    Path("c.yaml").write_text("model_name_or_path: model\ntrain_data: t.jsonl\n")
    code, out = _invoke("train", "--config", "c.yaml")
    assert code == 2
    assert (
        "config error: model_name_or_path='model': is a directory without tokenizer_config.json or tokenizer.json "
        "or tokenizer.model or vocab.json, so not a saved tokenizer. Give a local Hugging Face model directory"
    ) in out
    assert "Couldn't instantiate" not in out and "Traceback" not in out


def test_a_directory_with_a_tokenizer_but_no_model_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(json.dumps({"prompt": "2+2?", "ground_truth": "4"}) + "\n")
    build_tokenizer(["2+2=4"], vocab_size=64).save_pretrained("tok_only")  # tokenizer files, no config.json
    Path("c.yaml").write_text("model_name_or_path: tok_only\ntrain_data: t.jsonl\n")
    code, out = _invoke("train", "--config", "c.yaml")
    assert code == 2
    assert (
        "model_name_or_path='tok_only': is a directory without config.json or adapter_config.json, so not a saved model"
        in out
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("examples/arithmetic/runs/sft", "no such directory"),  # HF: "Repo id must be in the form ..."
        ("./sft", "no such directory"),
        ("t.jsonl", "is a file, not a model directory"),
    ],
)
def test_a_missing_local_model_directory_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(json.dumps({"prompt": "2+2?", "ground_truth": "4"}) + "\n")
    Path("c.yaml").write_text(f"model_name_or_path: {value}\ntrain_data: t.jsonl\n")
    code, out = _invoke("train", "--config", "c.yaml")
    assert code == 2
    assert f"config error: model_name_or_path={value!r}: {why}. Give a local Hugging Face model directory" in out
    assert "Repo id" not in out and "Traceback" not in out
