"""``python -m trainer sft``: the loss on completion tokens only, the row formats, learning, resume and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from tests.trainer.conftest import CHAT_TEMPLATE
from trainer.__main__ import app
from trainer.config import ConfigError, SFTConfig, config_from_dict
from trainer.data import DataError
from trainer.metrics import read_metrics
from trainer.rollout.base import PromptEncoder
from trainer.sft import sft
from trainer.sft_data import IGNORE_INDEX, collate, completion_nll, encode_rows


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {"prompt": f"What is {i % 5} plus {i % 3}?", "completion": f"<answer>{i % 5 + i % 3}</answer>"}
        for i in range(n)
    ]


def _config(model_dir: Path, data: Path, out: Path, **overrides: Any) -> SFTConfig:
    values: dict[str, Any] = {
        "model_name_or_path": str(model_dir),
        "train_data": str(data),
        "output_dir": str(out),
        "batch_size": 4,
        "max_steps": 3,
        "learning_rate": 3e-3,
        "progress_bar": False,
        "report_to_tensorboard": False,
        "seed": 3,
        **overrides,
    }
    return config_from_dict(values, cls=SFTConfig)


@pytest.fixture
def sft_data(tmp_path: Path) -> Path:
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(15)))
    return path


def _params(path: Path) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


# --------------------------------------------------------------------------------------- rows, tokens and labels


def test_labels_cover_the_completion_and_its_eos_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    eos = tokenizer.eos_token_id
    cfg = _config(tiny_model_dir, tmp_path / "unused.jsonl", tmp_path / "out")
    rows = [{"prompt": "What is 1 plus 2?", "completion": "3"}, {"prompt": "Hi", "completion": "<answer>12</answer>"}]
    encoder = PromptEncoder(tokenizer, apply_chat_template=True)  # no template: the text as is, as in train
    examples = encode_rows(rows, encoder, tokenizer, eos, cfg, "rows")
    assert examples[0].prompt_ids == tokenizer("What is 1 plus 2?")["input_ids"]
    assert examples[0].completion_ids == [*tokenizer("3", add_special_tokens=False)["input_ids"], eos]
    batch = collate(examples, tokenizer.pad_token_id)
    p0, c0 = len(examples[0].prompt_ids), len(examples[0].completion_ids)
    p1, c1 = len(examples[1].prompt_ids), len(examples[1].completion_ids)
    assert batch["labels"][0, :p0].tolist() == [IGNORE_INDEX] * p0  # the prompt is not trained on
    assert batch["labels"][0, p0 : p0 + c0].tolist() == examples[0].completion_ids
    assert batch["labels"][0, p0 + c0 :].tolist() == [IGNORE_INDEX] * (batch["labels"].shape[1] - p0 - c0)  # padding
    assert batch["labels"][1, p1 : p1 + c1].tolist() == examples[1].completion_ids
    assert batch["attention_mask"].sum(-1).tolist() == [p0 + c0, p1 + c1]


def test_the_nll_is_the_sum_over_completion_tokens_of_minus_log_p(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    from trainer.sft_data import SFTExample

    example = SFTExample(prompt_ids=[5, 6, 7], completion_ids=[8, 9, tokenizer.eos_token_id])
    nll, n, _ = completion_nll(model, collate([example], tokenizer.pad_token_id))
    with torch.no_grad():
        ids = torch.tensor([[5, 6, 7, 8, 9, tokenizer.eos_token_id]])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)  # (6, V)
    # Token t is predicted at position t - 1; the completion starts at position 3.
    expected = -sum(logp[t - 1, int(ids[0, t])].item() for t in (3, 4, 5))
    assert n == 3
    assert nll.item() == pytest.approx(expected, rel=1e-5)


def test_chat_rows_render_their_prompt_as_train_does(tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = CHAT_TEMPLATE
    cfg = _config(tiny_model_dir, tmp_path / "unused.jsonl", tmp_path / "out")
    encoder = PromptEncoder(tokenizer, apply_chat_template=True)
    user = [{"role": "user", "content": "What is 1 plus 2?"}]
    rows = [
        {"prompt": "What is 1 plus 2?", "completion": "3"},  # a string prompt becomes one user message
        {"prompt": user, "completion": [{"role": "assistant", "content": "3"}]},  # TRL's conversational form
        {"messages": [*user, {"role": "assistant", "content": "3"}]},  # the last message is the completion
    ]
    examples = encode_rows(rows, encoder, tokenizer, tokenizer.eos_token_id, cfg, "rows")
    assert examples[0] == examples[1] == examples[2]
    assert tokenizer.decode(examples[0].prompt_ids) == "<|user|>What is 1 plus 2?\n<|assistant|>"
    assert examples[0].prompt_ids == encoder.token_ids(user)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q"}, "has neither 'prompt' and 'completion' nor 'messages'"),
        ({"prompt": "q"}, "no 'completion' column"),
        ({"prompt": "q", "completion": "  "}, "non-empty string"),
        ({"prompt": "q", "completion": [{"role": "user", "content": "a"}]}, "one assistant message"),
        ({"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "a"}]}, "assistant's"),
        ({"messages": [{"role": "assistant", "content": "a"}]}, "at least two"),
        ({"prompt": 3, "completion": "a"}, "string or chat messages"),
    ],
)
def test_bad_rows_are_named(tiny_model_dir: Path, tmp_path: Path, row: dict[str, Any], message: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = _config(tiny_model_dir, tmp_path / "unused.jsonl", tmp_path / "out")
    with pytest.raises(DataError, match=message) as err:
        encode_rows([_rows(1)[0], row], PromptEncoder(tokenizer), tokenizer, 0, cfg, "data.jsonl")
    assert "data.jsonl row 2" in str(err.value)  # the second row, counted from 1 as train counts them


def test_long_prompts_keep_their_end_and_long_completions_their_start(tiny_model_dir: Path, tmp_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = _config(tiny_model_dir, tmp_path / "u.jsonl", tmp_path / "o", max_prompt_length=2, max_completion_length=3)
    [example] = encode_rows(
        [{"prompt": "What is 1 plus 2?", "completion": "12345"}], PromptEncoder(tokenizer), tokenizer, 0, cfg, "r"
    )
    assert example.prompt_ids == tokenizer("What is 1 plus 2?")["input_ids"][-2:]
    assert example.completion_ids == tokenizer("12345", add_special_tokens=False)["input_ids"][:3]


# ------------------------------------------------------------------------------------------------------ the loop


def test_sft_teaches_the_completions(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"prompt": "What is 1 plus 2?", "completion": "<answer>3</answer>"}) + "\n")
    result = sft(
        _config(
            tiny_model_dir,
            data,
            tmp_path / "run",
            max_steps=40,
            batch_size=2,
            learning_rate=1e-2,
            lr_scheduler_type="constant",
        )
    )
    losses = [row["loss/sft"] for row in result.history]
    assert losses[-1] < 0.05 < losses[0]
    assert result.history[-1]["sft/token_accuracy"] == 1.0
    model = AutoModelForCausalLM.from_pretrained(result.checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(result.checkpoint)
    ids = tokenizer("What is 1 plus 2?", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True) == "<answer>3</answer>"
    assert (result.checkpoint / "sft_config.yaml").exists()


def test_metrics_and_the_warm_up_start_above_zero(tiny_model_dir: Path, sft_data: Path, tmp_path: Path) -> None:
    result = sft(
        _config(tiny_model_dir, sft_data, tmp_path / "run", eval_data=str(sft_data), warmup_steps=4, max_steps=3)
    )
    rows = read_metrics(result.output_dir)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert set(rows[0]) == {"step", "eval/loss", "eval/token_accuracy"}
    # optim/lr is the rate each update ran at: lr * (u + 1) / (warmup_steps + 1), never 0.
    assert [r["optim/lr"] for r in rows[1:]] == pytest.approx([3e-3 * u / 5 for u in (1, 2, 3)])
    assert all(math.isfinite(rows[-1][k]) for k in ("loss/sft", "eval/loss", "optim/grad_norm", "perf/tokens_per_s"))
    assert rows[-1]["sft/epoch"] == pytest.approx(3 * 4 / 15)


def test_epochs_set_the_length(tiny_model_dir: Path, sft_data: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_model_dir, sft_data, tmp_path / "run", max_steps=None, num_train_epochs=1.5)
    assert len(sft(cfg).history) == math.ceil(1.5 * 15 / 4)


def test_gradient_accumulation_matches_one_big_batch(tiny_model_dir: Path, sft_data: Path, tmp_path: Path) -> None:
    one = sft(_config(tiny_model_dir, sft_data, tmp_path / "one", max_steps=1))
    four = sft(_config(tiny_model_dir, sft_data, tmp_path / "four", max_steps=1, gradient_accumulation_steps=4))
    assert four.history[0]["loss/sft"] == pytest.approx(one.history[0]["loss/sft"], rel=1e-5)
    assert four.history[0]["optim/grad_norm"] == pytest.approx(one.history[0]["optim/grad_norm"], rel=1e-4)
    for name, value in _params(one.checkpoint).items():
        torch.testing.assert_close(_params(four.checkpoint)[name], value, atol=1e-4, rtol=0)


def test_resume_gives_the_same_state_as_an_uninterrupted_run(
    tiny_model_dir: Path, sft_data: Path, tmp_path: Path
) -> None:
    whole = sft(_config(tiny_model_dir, sft_data, tmp_path / "whole", max_steps=5))
    first = sft(_config(tiny_model_dir, sft_data, tmp_path / "split", max_steps=5, save_steps=2))
    # Keep only checkpoint-2, as if the run had stopped there.
    for step in (4, 5):
        for f in sorted((tmp_path / "split" / f"checkpoint-{step}").rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        (tmp_path / "split" / f"checkpoint-{step}").rmdir()
    assert first.checkpoint.name == "checkpoint-5"
    resumed = sft(_config(tiny_model_dir, sft_data, tmp_path / "split", max_steps=5, resume_from_checkpoint="latest"))
    assert [r["step"] for r in resumed.history] == [3, 4, 5]
    for name, value in _params(whole.checkpoint).items():
        torch.testing.assert_close(_params(resumed.checkpoint)[name], value, atol=0, rtol=0)
    assert [r["loss/sft"] for r in read_metrics(tmp_path / "split")] == [r["loss/sft"] for r in whole.history]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"batch_size": 6, "gradient_accumulation_steps": 4}, "must divide batch_size"),
        ({"num_train_epochs": 0}, "must be > 0"),
        ({"max_completion_length": 0}, "must be >= 1 or null"),
        ({"per_device_train_batch_size": 8}, "Did you mean 'batch_size'"),
        ({"completion_only_loss": False}, "not supported: the loss is always on completion tokens only"),
        ({"num_generations": 8}, "unknown option 'num_generations'"),
        ({"lr_scheduler_type": "step"}, "must be one of"),
    ],
)
def test_invalid_sft_values_say_how_to_fix_them(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"model_name_or_path": "m", "train_data": "t.jsonl", **values}, cls=SFTConfig)


def test_the_command_line(tiny_model_dir: Path, sft_data: Path, tmp_path: Path) -> None:
    config = tmp_path / "sft.yaml"
    config.write_text(
        f"model_name_or_path: {tiny_model_dir}\ntrain_data: {sft_data}\noutput_dir: {tmp_path / 'run'}\n"
        "batch_size: 4\nmax_steps: 2\nprogress_bar: false\nreport_to_tensorboard: false\n"
    )
    result = CliRunner().invoke(app, ["sft", "--config", str(config), "--set", "learning_rate=1e-3"])
    assert result.exit_code == 0, result.output
    assert f"final checkpoint {tmp_path / 'run' / 'checkpoint-2'}" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q"}) + "\n")
    result = CliRunner().invoke(app, ["sft", "--config", str(config), "--set", f"train_data={bad}"])
    assert result.exit_code == 1
    # Named by its line, as train names rows; and found before the model loads (no weight-loading output first).
    assert result.output.startswith(f"data error: {bad}:1 has a 'prompt' but no 'completion'"), result.output
    result = CliRunner().invoke(app, ["fields", "sft"])
    assert result.exit_code == 0 and "completion_column" in result.output and "num_generations" not in result.output
