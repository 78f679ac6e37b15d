"""The tool-use example (examples/tool_use): its data, its summary, and run.sh end to end with tiny step counts
against a live reward server (the real sandbox runs the calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples import EXAMPLES, load_example
from tests.reward_server.serverproc import free_port

EXAMPLE = EXAMPLES / "tool_use"
prepare = load_example("tool_use", "prepare")
summary = load_example("tool_use", "summary")


def test_the_tool_completion_is_what_the_trainer_renders() -> None:
    from trainer.tools.client import ToolResult
    from trainer.tools.formats import make_format, result_text

    fmt = make_format("code_block")
    rendered = fmt.render(result_text(ToolResult("0", "ok", stdout="76680\n"), 2000))
    assert prepare.with_tool(710, 108) == "```python\nprint(710*108)\n```" + rendered + "<answer>76680</answer>"
    assert prepare.without_tool(710, 108) == "<answer>76680</answer>"


def test_summary_reads_start_after_and_per_step_rates() -> None:
    rows = [
        {"step": 0, "eval/pass@1": 0.02, "eval/num_prompts": 100.0},
        *(
            {"step": s, "reward/mean": 0.1 * s, "tools/calls_per_completion": 0.3 + 0.1 * s, "tools/error_rate": 0.0}
            for s in range(1, 5)
        ),
    ]
    rows[-1]["eval/pass@1"] = 0.5
    s = summary.arm_summary(rows, window=2)
    assert (s["pass@1_start"], s["pass@1_after"], s["steps"]) == (0.02, 0.5, 4)
    assert s["tool_call_rate_first"] == pytest.approx(0.4) and s["tool_call_rate_last"] == pytest.approx(0.65)
    assert s["reward_last"] == pytest.approx(0.35) and s["tool_error_rate_last"] == 0.0


@pytest.mark.slow
def test_run_sh_with_tiny_step_counts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {
        **os.environ,
        "OUT": str(out),
        "PORT": str(free_port()),
        "PYTHON": sys.executable,
        "SFT_STEPS": "4",
        "RL_STEPS": "2",
        "EVAL_PROMPTS": "4",
        "ARMS": "grpo random_reward",
        "RLVR_PRELOAD_LANGUAGE_MODELS": "false",
    }
    done = subprocess.run(["bash", str(EXAMPLE / "run.sh")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    figures = json.loads((out / "summary.json").read_text())
    assert set(figures) == {"grpo", "random_reward"}
    for arm in figures.values():
        assert arm["steps"] == 2 and arm["eval_prompts"] == 4
        assert 0 <= arm["pass@1_start"] <= 1 and 0 <= arm["pass@1_after"] <= 1
        assert arm["tool_call_rate_first"] is not None and arm["tool_error_rate_first"] is not None


def test_numbers_are_one_token_a_three_digit_chunk() -> None:
    from trainer.tiny import build_tokenizer

    tokenizer = build_tokenizer(
        ["Compute 126 times 117.\n" + prepare.with_tool(126, 117)],
        vocab_size=300,
        extra_tokens=[*prepare.FENCES, *prepare.TAGS, *prepare.NUMBER_CHUNKS],
    )
    pieces = [tokenizer.decode([i]) for i in tokenizer("print(835*191)\n155848 67123")["input_ids"]]
    # Each operand one token, each product cut from the left into chunks of up to three digits.
    assert [p for p in pieces if p.strip().isdigit()] == ["835", "191", "155", "848", "671", "23"]


def test_the_table_over_runs_gives_mean_min_and_max() -> None:
    def run(after: float, calls_last: float) -> dict[str, dict[str, float | None]]:
        keys = [k for k, _ in summary.TABLE]
        row: dict[str, float | None] = dict.fromkeys(keys, 0.0)
        row["pass@1_after"], row["tool_call_rate_last"] = after, calls_last
        return {"grpo": row}

    lines = summary.table([run(1.0, 0.94), run(0.99, 0.997), run(1.0, 0.995)]).splitlines()
    assert lines[0] == "| figure | grpo |"
    assert "| held-out greedy pass@1, after | 99.7% [99.0, 100.0] |" in lines
    assert "| tool-call rate, last 3 steps | 97.7% [94.0, 99.7] |" in lines
