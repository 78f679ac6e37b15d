"""The decode loop (trainer/rollout/decode.py): the tokens model.generate draws, for the same RNG state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from trainer.rollout import decode
from trainer.rollout.base import SamplingParams
from trainer.rollout.kv_cache import decode_cache
from trainer.rollout.transformers_backend import TransformersBackend

PROMPTS = ["What is 1 plus 2?", "What is 12 plus 3 plus 4?"]  # different lengths: one is left-padded


@pytest.fixture()
def backend(tiny_model_dir: Path) -> TransformersBackend:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return TransformersBackend(model, AutoTokenizer.from_pretrained(tiny_model_dir), apply_chat_template=False)


def _generate(backend: TransformersBackend, config: GenerationConfig, groups: int, seed: int) -> torch.Tensor:
    """model.generate's new tokens for PROMPTS, each repeated ``groups`` times, from ``seed``."""
    ids, mask = backend.encode(PROMPTS)
    torch.manual_seed(seed)
    out = backend.model.generate(  # type: ignore[operator]
        input_ids=ids.repeat_interleave(groups, 0),
        attention_mask=mask.repeat_interleave(groups, 0),
        generation_config=config,
    )
    return out[:, ids.shape[1] :]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(0.7, 0, 1.0), (1.0, 5, 1.0), (1.0, 0, 0.8), (0.6, 7, 0.9), (1.3, 0, 1.0), (0.0, 0, 1.0)],
)
def test_every_sampling_setting_draws_what_generate_draws(
    backend: TransformersBackend, temperature: float, top_k: int, top_p: float
) -> None:
    sampling = SamplingParams(max_new_tokens=24, temperature=temperature, top_p=top_p, top_k=top_k)
    torch.manual_seed(11)
    ours = backend.generate(PROMPTS, 4, sampling)
    theirs = _generate(backend, backend._generation_config(sampling), 4, 11)
    assert ours.completion_ids.shape == theirs.shape
    kept = ours.completion_mask.bool()
    assert torch.equal(ours.completion_ids[kept], theirs[kept])
    assert torch.equal(ours.completion_ids[~kept], torch.full_like(theirs[~kept], backend.pad_token_id))


def _half_the_vocabulary(backend: TransformersBackend) -> list[int]:
    return list(range(0, backend.model.config.vocab_size, 2))  # type: ignore[union-attr]


@pytest.mark.parametrize("check_every", [1, 4])
def test_rows_end_at_eos_and_the_loop_stops_where_generate_stops(
    backend: TransformersBackend, check_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the vocabulary ends a row, so rows end after a few tokens each, at different steps; with the GPU's
    deferred check (every 4 tokens) the steps run past the last EOS are cut off again."""
    monkeypatch.setattr(decode, "stop_check_every", lambda device: check_every)
    eos = _half_the_vocabulary(backend)
    sampling = SamplingParams(max_new_tokens=40)
    ids, mask = backend.encode(PROMPTS)
    ids, mask = ids.repeat_interleave(6, 0), mask.repeat_interleave(6, 0)
    torch.manual_seed(3)
    ours = decode.sample(backend.model, ids, mask, decode_cache(), sampling, eos, backend.pad_token_id)
    config = backend._generation_config(sampling)
    config.eos_token_id = eos
    theirs = _generate(backend, config, 6, 3)
    assert 1 < theirs.shape[1] < 40  # every row ended early, not all at the first token
    assert torch.equal(ours, theirs)


def test_the_prompt_goes_through_the_head_at_its_last_position_only(backend: TransformersBackend) -> None:
    widths: list[int] = []
    hook = backend.model.lm_head.register_forward_hook(lambda m, a, out: widths.append(out.shape[1]))  # type: ignore[union-attr]
    try:
        backend.share_prompts = False  # the first forward feeds every prompt token
        backend.generate(PROMPTS, 2, SamplingParams(max_new_tokens=3))
    finally:
        hook.remove()
    assert backend.encode(PROMPTS)[0].shape[1] > 1
    assert widths == [1, 1, 1]


def test_a_cache_that_holds_the_whole_prompt_is_refused(backend: TransformersBackend) -> None:
    ids, mask = backend.encode(PROMPTS)
    cache = decode_cache()
    cache.update(torch.zeros(2, 2, ids.shape[1], 16), torch.zeros(2, 2, ids.shape[1], 16), 0)
    with pytest.raises(ValueError, match="cached < prompt width"):
        decode.sample(backend.model, ids, mask, cache, SamplingParams(max_new_tokens=4), [0], 0)
