"""Rollouts with transformers generate: padding, chat template, EOS handling, and log-probs that match sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from tests.trainer.conftest import CHAT_TEMPLATE
from trainer.rollout.base import RolloutBatch, SamplingParams, completion_mask_from_ids
from trainer.rollout.forward import completion_log_probs
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.tiny import build_tiny_model, build_tokenizer


@pytest.fixture()
def backend(tiny_model_dir: Path) -> TransformersBackend:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    return TransformersBackend(model, tokenizer, max_prompt_length=32)


@pytest.mark.parametrize(
    ("ids", "mask", "truncated", "reason"),
    [
        ([[5, 6, 0, 9]], [[1, 1, 1, 0]], [False], "EOS included, what follows it masked"),
        ([[0, 0, 0, 0]], [[1, 0, 0, 0]], [False], "EOS first: a one-token completion"),
        ([[5, 6, 7, 8]], [[1, 1, 1, 1]], [True], "no EOS: truncated, all tokens count"),
        ([[5, 1, 0, 1]], [[1, 1, 0, 0]], [False], "either of two EOS ids ends it, the first one wins"),
    ],
)
def test_completion_mask_hand_computed(
    ids: list[list[int]], mask: list[list[int]], truncated: list[bool], reason: str
) -> None:
    got_mask, got_truncated = completion_mask_from_ids(torch.tensor(ids), eos_token_ids=(0, 1))
    assert got_mask.tolist() == mask, reason
    assert got_truncated.tolist() == truncated, reason


def test_prompts_are_left_padded_and_cut_from_the_start(backend: TransformersBackend) -> None:
    short, long = "What is 1 plus 2?", "What is 1 plus 2? " * 10
    ids, mask = backend.encode([short, long])
    n_short = len(backend.tokenizer(short)["input_ids"])
    assert ids.shape[1] == 32  # the long prompt was cut to max_prompt_length
    assert mask[0].tolist() == [0] * (32 - n_short) + [1] * n_short
    assert (ids[0, : 32 - n_short] == backend.pad_token_id).all()
    full = backend.tokenizer(long)["input_ids"]
    assert ids[1].tolist() == full[-32:]  # the end of the prompt is kept


def test_chat_template_is_applied_where_the_tokenizer_has_one(backend: TransformersBackend) -> None:
    assert backend.render("hi") == "hi"  # no template: the text as is
    with pytest.raises(ValueError, match="chat_template"):
        backend.render([{"role": "user", "content": "hi"}])
    backend.tokenizer.chat_template = CHAT_TEMPLATE
    templated = TransformersBackend(backend.model, backend.tokenizer)
    assert templated.render("What is 2 plus 2?") == "<|user|>What is 2 plus 2?\n<|assistant|>"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert templated.render(messages) == "<|system|>Be brief.\n<|user|>2+2?\n<|assistant|>"
    plain = TransformersBackend(backend.model, backend.tokenizer, apply_chat_template=False)
    assert plain.render("What is 2 plus 2?") == "What is 2 plus 2?"


def test_generate_gives_g_completions_per_prompt_stopping_at_eos(backend: TransformersBackend) -> None:
    eos = backend.tokenizer.eos_token_id
    # Make EOS likely so both stopped and truncated completions occur.
    with torch.no_grad():
        backend.model.get_output_embeddings().weight[eos] *= 0
        backend.model.get_output_embeddings().weight[eos] += 0.5 * backend.model.get_input_embeddings().weight.mean(0)
    torch.manual_seed(0)
    batch = backend.generate(["What is 1 plus 2?", "What is 3 plus 4?"], 3, SamplingParams(max_new_tokens=6))
    assert len(batch) == 6
    assert batch.prompt_index.tolist() == [0, 0, 0, 1, 1, 1]
    assert len(batch.completion_texts) == 6
    for row, mask, truncated in zip(batch.completion_ids, batch.completion_mask, batch.is_truncated, strict=True):
        n = int(mask.sum())
        if truncated:
            assert n == 6 and eos not in row.tolist()
        else:
            assert row[n - 1] == eos  # the last counted token is the EOS
            assert (row[n:] == backend.pad_token_id).all()
            assert eos not in row[: n - 1].tolist()
    assert torch.equal(batch.prompt_ids[0], batch.prompt_ids[2])  # the same prompt repeated for its group


def test_greedy_decoding_is_deterministic(backend: TransformersBackend) -> None:
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    a = backend.generate(["What is 1 plus 2?"], 2, greedy)
    b = backend.generate(["What is 1 plus 2?"], 2, greedy)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.completion_ids[0], a.completion_ids[1])


def test_a_shared_prefill_samples_what_the_full_prefill_samples(backend: TransformersBackend) -> None:
    """Each prompt's cache is computed once (2 rows, not 6) and copied: same seed, same completions."""
    prompts = ["What is 1 plus 2?", "What is 12 plus 3 plus 4?"]  # different lengths: one is left-padded
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0)
    shapes: list[tuple[int, ...]] = []
    backend.model.get_input_embeddings().register_forward_pre_hook(lambda m, a: shapes.append(tuple(a[0].shape)))
    batches = []
    for share in (False, True):
        backend.share_prompts = share
        shapes.clear()
        torch.manual_seed(3)
        batches.append(backend.generate(prompts, 3, sampling))
        width = batches[-1].prompt_ids.shape[1]
        assert shapes[0] == ((2, width - 1) if share else (6, width))  # the prefill
        assert shapes[1] == (6, 1)  # then the last prompt token, or the first decoding step
    full, shared = batches
    assert torch.equal(shared.prompt_ids, full.prompt_ids)
    assert torch.equal(shared.completion_ids, full.completion_ids)
    assert torch.equal(shared.completion_mask, full.completion_mask)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_match_the_sampling_distribution(backend: TransformersBackend, temperature: float) -> None:
    """Recomputed log-probs (left padding, positions, temperature) equal those generate sampled from."""
    prompts = ["What is 1 plus 2?", "What is 12 plus 3 plus 4?"]
    sampling = SamplingParams(max_new_tokens=7, temperature=temperature)
    torch.manual_seed(1)
    batch = backend.generate(prompts, 2, sampling)
    ids, mask = backend.encode(prompts)
    torch.manual_seed(1)
    config = backend._generation_config(sampling)
    config.output_logits, config.return_dict_in_generate = True, True
    out = backend.model.generate(
        input_ids=ids.repeat_interleave(2, 0), attention_mask=mask.repeat_interleave(2, 0), generation_config=config
    )
    sampled = out.sequences[:, ids.shape[1] :]
    logits = torch.stack(out.logits, 1) / temperature  # raw logits; the sampler applied the temperature
    expected = logits.log_softmax(-1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        got, entropy = completion_log_probs(backend.model, batch, temperature, with_entropy=True)
    m = batch.completion_mask.bool()
    torch.testing.assert_close(got[m], expected[m], atol=1e-5, rtol=1e-5)
    assert entropy is not None and entropy.shape == got.shape


def test_micro_batch_select_and_concat_keep_log_probs(backend: TransformersBackend) -> None:
    torch.manual_seed(2)
    sampling = SamplingParams(max_new_tokens=6)
    a = backend.generate(["What is 1 plus 2?"], 2, sampling)
    b = backend.generate(["What is 11 plus 22 plus 33?"], 2, sampling)
    joined = RolloutBatch.concat([a, b], backend.pad_token_id)
    assert joined.prompt_index.tolist() == [0, 0, 1, 1]
    with torch.no_grad():
        whole, _ = completion_log_probs(backend.model, joined, 1.0)
        part, _ = completion_log_probs(backend.model, joined.select(slice(0, 2)), 1.0)
        alone, _ = completion_log_probs(backend.model, a, 1.0)
    sub = joined.select(slice(0, 2))
    assert sub.prompt_ids.shape[1] == a.prompt_ids.shape[1]  # shared left padding dropped
    m = sub.completion_mask.bool()
    torch.testing.assert_close(part[m], whole[:2, : part.shape[1]][m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(part[m], alone[:, : part.shape[1]][m], atol=1e-5, rtol=1e-5)


def test_generation_ignores_the_checkpoints_sampling_defaults(backend: TransformersBackend) -> None:
    # A checkpoint's generation_config (Qwen ships top_p=0.8, repetition_penalty=1.05) must not leak in.
    backend.model.generation_config = GenerationConfig(top_p=0.1, top_k=2, repetition_penalty=3.0, temperature=0.1)
    config = backend._generation_config(SamplingParams(max_new_tokens=3))
    assert (config.top_p, config.top_k, config.repetition_penalty, config.temperature) == (1.0, 0, 1.0, 1.0)


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_left_padded_batch_gives_each_row_the_log_probs_it_has_alone(architecture: str, attention: str) -> None:
    """Padding widths 0, 14 and 21 tokens: positions and the attention mask must make padding invisible."""
    corpus = [f"What is {a} plus {b}? {a + b}" for a in range(10) for b in range(10)]
    tokenizer = build_tokenizer(corpus, vocab_size=300)
    model = build_tiny_model(
        tokenizer, architecture=architecture, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, seed=3
    )  # type: ignore[arg-type]
    model.config._attn_implementation = attention
    backend = TransformersBackend(model, tokenizer)
    prompts = ["What is 1 plus 2?", "What is 11 plus 22 plus 33 plus 44 plus 55?", "7"]
    torch.manual_seed(0)
    batch = backend.generate(prompts, 2, SamplingParams(max_new_tokens=8))
    pads = (batch.prompt_mask == 0).sum(-1).tolist()
    assert sorted(set(pads)) == [0, 14, 21]
    with torch.no_grad():
        together, _ = completion_log_probs(model, batch, 0.8)
        for i in range(len(batch)):
            alone_batch = batch.select(torch.tensor([i]))
            assert alone_batch.prompt_mask.all()  # its own left padding dropped: the row as if sampled alone
            alone, _ = completion_log_probs(model, alone_batch, 0.8)
            m = alone_batch.completion_mask[0].bool()
            torch.testing.assert_close(together[i, : alone.shape[1]][m], alone[0][m], atol=2e-6, rtol=0)
