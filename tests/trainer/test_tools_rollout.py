"""Multi-turn rollouts with a Python tool: the loop's bookkeeping, a tiny model that calls the tool, tool output
carrying exactly no gradient, and GRPO runs with tools (overlapped scoring, a stub tool server over HTTP)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT
from tests.trainer.tools_helpers import (
    TAUGHT,
    FakeToolClient,
    ScriptedBackend,
    StubToolServer,
    build_tool_model,
)
from trainer.algorithms.losses import grpo_loss
from trainer.config import config_from_dict
from trainer.distributed import Distributed
from trainer.reward_client import RewardScorer
from trainer.rollout.base import RolloutBatch, SamplingParams
from trainer.rollout.forward import completion_log_probs
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.stand_in import StandInServer
from trainer.tools.formats import make_format
from trainer.tools.rollout import ToolBackend, tool_metrics


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model taught to call the tool (:func:`tests.trainer.tools_helpers.build_tool_model`)."""
    return build_tool_model(tmp_path_factory.mktemp("tool_model"))


def _tool_backend(model_dir: Path, client: Any, **kwargs: Any) -> ToolBackend:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    inner = TransformersBackend(model, tokenizer)
    return ToolBackend(inner, tokenizer, client, make_format("code_block"), max_tool_calling_iterations=2, **kwargs)


def _decode_where(tokenizer: Any, batch: RolloutBatch, row: int, mask: torch.Tensor) -> str:
    ids = batch.completion_ids[row][mask[row].bool()]
    return str(tokenizer.decode(ids.tolist()))


# ----------------------------------------------------------------------------------------------- a real tiny model


def test_a_tiny_model_calls_the_tool_and_the_output_is_context_only(tool_model_dir: Path) -> None:
    client = FakeToolClient()
    backend = _tool_backend(tool_model_dir, client)
    tokenizer = backend.tokenizer
    greedy = SamplingParams(max_new_tokens=48, temperature=0.0)
    batch = backend.generate(["Compute 6 times 7.", "Compute 9 times 8."], 2, greedy)

    # One batched request for the chunk's first calls (4 rows, 2 prompts), each with its own session.
    first = client.batches[0]
    assert [r.code for r in first] == ["print(6*7)"] * 2 + ["print(9*8)"] * 2
    assert len({r.session_id for r in first}) == 4 and all("@" not in str(r.session_id) for r in first)
    for row, product in zip(range(4), ["42", "42", "72", "72"], strict=True):
        tool_text = _decode_where(tokenizer, batch, row, batch.tool_output_mask)  # type: ignore[arg-type]
        assert tool_text == f"\n```output\n{product}\n```\n"  # exactly the rendered result, nothing of the model's
        model_text = _decode_where(tokenizer, batch, row, batch.model_token_mask)
        assert model_text.startswith(f"```python\nprint({'6*7' if product == '42' else '9*8'})\n```")
        # Scored text: the model's own, without the tool's output.
        assert batch.completion_texts[row] == str(
            tokenizer.decode(batch.completion_ids[row][batch.model_token_mask[row].bool()], skip_special_tokens=True)
        )
        assert "```output" not in batch.completion_texts[row]
    assert batch.tool_failed is not None and not batch.tool_failed.any()
    assert torch.equal(batch.completion_mask, batch.model_token_mask + batch.tool_output_mask)  # type: ignore[operator]
    metrics = tool_metrics(backend, Distributed())
    assert metrics["tools/calls"] == 4 and metrics["tools/error_rate"] == 0.0
    assert metrics["tools/turns_per_completion"] == pytest.approx(2.0)


def test_tool_output_tokens_carry_exactly_no_gradient(tool_model_dir: Path) -> None:
    client = FakeToolClient()
    backend = _tool_backend(tool_model_dir, client)
    torch.manual_seed(0)
    batch = backend.generate(["Compute 6 times 7.", "Compute 12 times 3."], 2, SamplingParams(max_new_tokens=40))
    tool = batch.tool_output_mask
    assert tool is not None and tool.sum() > 0
    model = AutoModelForCausalLM.from_pretrained(tool_model_dir)
    mask = batch.model_token_mask  # what compute_advantages starts the loss mask from

    def grads(old_at_tool: float, ref_at_tool: float) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        model.zero_grad(set_to_none=True)
        logp, _ = completion_log_probs(model, batch, 1.0)
        logp.retain_grad()
        where = tool.bool()
        old = logp.detach().masked_fill(where, old_at_tool)  # garbage old and reference log-probs on tool tokens
        ref = (logp.detach() - 0.1).masked_fill(where, ref_at_tool)
        out = grpo_loss(
            logp, old, torch.tensor([1.0, -1.0, 0.5, -0.5]), mask, loss_type="dapo", epsilon=0.2, epsilon_high=None,
            beta=0.1, ref_logp=ref, max_completion_length=40, num_items_in_batch=mask.sum(),
        )  # fmt: skip
        out.loss.backward()
        assert logp.grad is not None
        return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}, logp.grad

    g1, logp_grad = grads(0.0, 0.0)
    g2, _ = grads(-30.0, 5.0)
    assert torch.all(logp_grad[tool.bool()] == 0)  # exactly zero, on every tool token
    assert torch.count_nonzero(logp_grad[mask.bool()]) > 0
    assert all(torch.equal(g1[k], g2[k]) for k in g1)  # what sits on tool positions never reaches the weights


def test_tools_in_a_grpo_run_with_overlapped_scoring_over_http_and_resume(tool_model_dir: Path, tmp_path: Path) -> None:
    from trainer.metrics import read_metrics
    from trainer.train import train

    rows = [{"prompt": f"Compute {a} times {b}.", "ground_truth": str(a * b), "task": "math"} for a, b in TAUGHT * 2]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stand_in = StandInServer()

    def run(tools_url: str, out: str, **extra: Any) -> Any:
        values = {
            "model_name_or_path": str(tool_model_dir),
            "train_data": str(data),
            "output_dir": str(tmp_path / out),
            "max_steps": 2,
            "prompt_batch_size": 4,
            "num_generations": 2,
            "rollout_chunk_prompts": 2,
            "overlap_scoring": True,
            "max_completion_length": 40,
            "beta": 0.04,
            "learning_rate": 1e-3,
            "progress_bar": False,
            "report_to_tensorboard": False,
            "tools": ["python"],
            "tool_server_urls": [tools_url],
            "tool_retry_deadline_s": 30,
            "seed": 3,
            **extra,
        }
        scorer = RewardScorer("http://stand-in", client=httpx.AsyncClient(transport=httpx.MockTransport(stand_in)))
        try:
            return train(config_from_dict(values), scorer=scorer)
        finally:
            scorer.close()

    with StubToolServer(busy=1, marker="~tool-wrote-this~") as tools:
        result = run(tools.url, "whole")
        first_bodies = list(tools.bodies)
        scored = list(stand_in.items)
        # The same run stopped after step 1 (its last checkpoint removed), then resumed.
        run(tools.url, "cut", save_steps=1)
        shutil.rmtree(tmp_path / "cut" / "checkpoint-2")
        resumed = run(tools.url, "cut", resume_from_checkpoint="latest")
    steps = [h for h in result.history if h["step"] > 0]
    assert len(steps) == 2
    for h in steps:
        assert h["tools/calls"] > 0 and h["tools/calls_per_completion"] <= 2
        assert h["tools/turns_per_completion"] == pytest.approx(1 + h["tools/calls_per_completion"])
        assert h["tools/server_time_s"] == pytest.approx(0.002 * h["tools/calls"])
        assert torch.isfinite(torch.tensor(h["loss/policy"]))
    # Each chunk of 2 prompts x 2 completions sent its first calls as one batch, after one retried 503.
    call_batches = [b["calls"] for b in first_bodies]
    assert len(call_batches[0]) == 4 and call_batches[0] == call_batches[1]
    # What the reward server scored is the model's text: never the tool's output.
    assert len(scored) == 16 and all("~tool-wrote-this~" not in item["response"] for item in scored)

    # Resume repeats the uninterrupted run exactly: same weights, same metrics (the tool calls included).
    whole_model = AutoModelForCausalLM.from_pretrained(result.checkpoint).state_dict()
    for name, value in AutoModelForCausalLM.from_pretrained(resumed.checkpoint).state_dict().items():
        torch.testing.assert_close(value, whole_model[name], atol=0, rtol=0)

    def without_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "perf/", "tools/wait_s"))} for r in rows]

    assert without_timing(read_metrics(tmp_path / "cut")) == without_timing(read_metrics(tmp_path / "whole"))


@pytest.mark.slow
def test_tools_on_two_ddp_ranks(tool_model_dir: Path, tmp_path: Path) -> None:
    """Each rank runs its own rows' calls in its own sessions; the tools/* metrics are summed over ranks."""
    rows = [{"prompt": f"Compute {a} times {b}.", "ground_truth": str(a * b), "task": "math"} for a, b in TAUGHT]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    with StubToolServer() as tools:
        args = ["-m", "tests.trainer.tools_ddp_case", str(tool_model_dir), str(data), str(tmp_path / "run"), tools.url]
        proc = subprocess.run([*cmd, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    step = json.loads((tmp_path / "run" / "history.json").read_text())[-1]
    sessions = [c["session_id"] for body in tools.bodies for c in body["calls"]]
    first_calls = [s for s in sessions if "@" not in s]
    assert step["tools/calls"] == len(sessions)  # both ranks' calls, summed
    assert {s.split("-rank")[1][0] for s in first_calls} == {"0", "1"}  # both ranks called, each its own sessions
    assert len(set(first_calls)) == len(first_calls)


# ------------------------------------------------------------------------------------- the loop's bookkeeping


def _scripted(tokenizer: Any, client: Any, turns: Any, eos_after: Any, **kwargs: Any) -> ToolBackend:
    inner = ScriptedBackend(tokenizer, turns, eos_after)
    options = {"max_tool_calling_iterations": 2, **kwargs}
    return ToolBackend(inner, tokenizer, client, make_format("code_block"), **options)


def test_sessions_limits_and_faults(tool_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    call = "```python\nprint(6*7)\n```"
    # row0: calls, calls, then answers; row1: calls three times (the third is over the limit); row2: answers at
    # once; row3: its call hits a lost session.
    texts = {0: [call, call, "The answer is 42."], 1: [call, call, call], 2: ["The answer is 42."], 3: [call, "x"]}
    client = FakeToolClient(close_delay_s=0.3)
    backend = _scripted(
        tokenizer, client, lambda k, t: texts[k][t], lambda k, t: t == len(texts[k]) - 1 and k in (0, 2)
    )
    client.statuses = ["ok", "ok", "session_lost"]  # the first batch: rows 0, 1 and 3
    batch = backend.generate(["row0", "row1", "row2", "row3"], 1, SamplingParams(max_new_tokens=200))

    assert [[r.session_id for r in b] for b in client.batches] == [
        [f"{backend.session_prefix}-{_batch_id(client)}-{k}" for k in (0, 1, 3)],
        [f"{backend.session_prefix}-{_batch_id(client)}-{k}@fake" for k in (0, 1)],  # the full ids come back
    ]
    assert batch.tool_failed.tolist() == [False, False, False, True]  # type: ignore[union-attr]
    assert batch.is_truncated.tolist() == [False, True, False, True]  # row1 ended on a call it may not make
    assert batch.completion_texts[0] == call + call + "The answer is 42."
    assert batch.completion_texts[1] == call * 3
    assert batch.completion_texts[2] == "The answer is 42."
    assert batch.completion_texts[3] == call  # ended at the fault: no output, no further turn
    m = backend.stats.metrics(Distributed())
    assert (m["tools/calls"], m["tools/status/session_lost"], m["tools/status/over_limit"]) == (5, 1, 1)
    assert m["tools/failed_completions"] == 1 and m["tools/error_rate"] == pytest.approx(1 / 5)
    # Once every row is done, the sessions the server opened are closed in one go: rows 0 and 1 (row 2 made no
    # call, row 3's session was lost before the server answered with a full id).
    prefix = f"{backend.session_prefix}-{_batch_id(client)}"
    assert client.closed_sessions == [[f"{prefix}-0@fake", f"{prefix}-1@fake"]]
    assert m["tools/sessions_closed"] == 2
    assert m["tools/wait_s"] >= 0.3  # closing the sessions is time waited on the server too
    assert client.closed is False
    backend.close()
    assert client.closed is True


def _batch_id(client: FakeToolClient) -> str:
    return str(client.batches[0][0].session_id).split("-")[-2]


def test_the_budget_counts_tool_tokens_and_cuts_the_output(tool_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    call = "```python\nprint(6*7)\n```"
    call_len = len(tokenizer(call, add_special_tokens=False)["input_ids"])
    client = FakeToolClient()
    backend = _scripted(tokenizer, client, lambda k, t: call, lambda k, t: False)
    batch = backend.generate(["row0"], 1, SamplingParams(max_new_tokens=call_len + 3))
    assert int(batch.completion_mask.sum()) == call_len + 3  # max_completion_length holds model and tool tokens
    assert int(batch.tool_output_mask.sum()) == 3  # type: ignore[union-attr]
    assert batch.is_truncated.tolist() == [True]
    assert len(client.batches) == 1


def test_a_malformed_call_is_answered_without_the_server(tool_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    bad = '<tool_call>{"name": "python", "arguments": {"code": }</tool_call>'
    client = FakeToolClient()
    inner = ScriptedBackend(tokenizer, lambda k, t: [bad, "ok"][t], lambda k, t: t == 1)
    backend = ToolBackend(inner, tokenizer, client, make_format("qwen_json"), max_tool_calling_iterations=3)
    batch = backend.generate(["row0"], 1, SamplingParams(max_new_tokens=200))
    assert client.batches == []
    output = _decode_where(tokenizer, batch, 0, batch.tool_output_mask)  # type: ignore[arg-type]
    assert output.startswith("\n<tool_response>\nthe tool call is not valid JSON")
    assert backend.stats.outcomes["invalid_call"] == 1
