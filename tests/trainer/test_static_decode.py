"""The static-cache decode loop (trainer/rollout/static_decode.py): the tokens of the appending-cache loop, for the
same RNG state, over one reused fixed-size cache."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.config import ConfigError, config_from_dict
from trainer.config.conversion import convert
from trainer.rollout import decode
from trainer.rollout.base import SamplingParams
from trainer.rollout.kv_cache import decode_cache
from trainer.rollout.static_decode import StaticDecoder
from trainer.rollout.transformers_backend import TransformersBackend

PROMPTS = ["What is 1 plus 2?", "What is 12 plus 3 plus 4?"]  # different lengths: one is left-padded


@pytest.fixture()
def backend(tiny_model_dir: Path) -> TransformersBackend:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return TransformersBackend(model, AutoTokenizer.from_pretrained(tiny_model_dir), apply_chat_template=False)


def _rows(backend: TransformersBackend, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = backend.encode(PROMPTS)
    return ids.repeat_interleave(groups, 0), mask.repeat_interleave(groups, 0)


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.6, 7, 0.9), (0.0, 0, 1.0)])
def test_static_cache_draws_the_appending_loops_tokens(
    backend: TransformersBackend, temperature: float, top_k: int, top_p: float
) -> None:
    sampling = SamplingParams(max_new_tokens=20, temperature=temperature, top_p=top_p, top_k=top_k)
    ids, mask = _rows(backend, 4)
    torch.manual_seed(5)
    theirs = decode.sample(backend.model, ids, mask, decode_cache(), sampling, [10**6], backend.pad_token_id)
    torch.manual_seed(5)
    ours = StaticDecoder(backend.model).sample(ids, mask, sampling, [10**6], backend.pad_token_id)
    assert ours.shape == (8, 20)
    assert torch.equal(ours, theirs)


def test_rows_end_at_eos_as_in_the_appending_loop(backend: TransformersBackend) -> None:
    eos = list(range(0, backend.model.config.vocab_size, 2))  # half the vocabulary ends a row
    sampling = SamplingParams(max_new_tokens=40)
    ids, mask = _rows(backend, 6)
    torch.manual_seed(3)
    theirs = decode.sample(backend.model, ids, mask, decode_cache(), sampling, eos, backend.pad_token_id)
    torch.manual_seed(3)
    ours = StaticDecoder(backend.model).sample(ids, mask, sampling, eos, backend.pad_token_id)
    assert 1 < theirs.shape[1] < 40
    assert torch.equal(ours, theirs)


def test_one_cache_serves_every_call_of_a_shape(backend: TransformersBackend) -> None:
    """The second call reuses (and empties) the first call's cache, and draws what a fresh decoder draws; a prompt
    of another width within the same room uses the same cache too."""
    decoder = StaticDecoder(backend.model)
    sampling = SamplingParams(max_new_tokens=12)
    ids, mask = _rows(backend, 2)
    decoder.sample(ids, mask, sampling, [10**6], backend.pad_token_id, max_prompt_length=32)
    first = decoder.cache(4, 32 + 12, torch.float32)
    torch.manual_seed(9)
    again = decoder.sample(ids, mask, sampling, [10**6], backend.pad_token_id, max_prompt_length=32)
    torch.manual_seed(9)
    fresh = StaticDecoder(backend.model).sample(ids, mask, sampling, [10**6], backend.pad_token_id, 32)
    assert torch.equal(again, fresh)
    decoder.sample(ids[:, 2:], mask[:, 2:], sampling, [10**6], backend.pad_token_id, max_prompt_length=32)
    assert decoder.cache(4, 44, torch.float32) is first and len(decoder._caches) == 1


def test_a_prompt_wider_than_the_room_is_refused(backend: TransformersBackend) -> None:
    ids, mask = _rows(backend, 1)
    with pytest.raises(ValueError, match=f"prompt width {ids.shape[1]} is over max_prompt_length 3"):
        StaticDecoder(backend.model).sample(ids, mask, SamplingParams(max_new_tokens=4), [0], 0, max_prompt_length=3)


def test_the_backend_samples_the_same_batch_with_either_cache(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    sampling = SamplingParams(max_new_tokens=16, temperature=0.8)
    batches = []
    for cache in ("dynamic", "static"):
        backend = TransformersBackend(
            model, tokenizer, apply_chat_template=False, max_prompt_length=24, cache_implementation=cache
        )
        assert (backend.static is not None) == (cache == "static")
        torch.manual_seed(2)
        batches.append(backend.generate(PROMPTS, 3, sampling))
    assert torch.equal(batches[0].completion_ids, batches[1].completion_ids)
    assert batches[0].completion_texts == batches[1].completion_texts


@pytest.mark.parametrize(("trl", "ours"), [("static", "static"), ("offloaded", "dynamic"), ("dynamic", "dynamic")])
def test_the_option_is_checked_and_carries_over_from_trl(trl: str, ours: str) -> None:
    needed = {"model_name_or_path": "m", "train_data": "d"}
    assert config_from_dict({**needed, "cache_implementation": "static"}).cache_implementation == "static"
    with pytest.raises(ConfigError, match="cache_implementation"):
        config_from_dict({**needed, "cache_implementation": "paged"})
    assert convert({"cache_implementation": trl, "max_steps": 1}, "trl").options["cache_implementation"] == ours


def test_under_bf16_autocast_keys_and_values_are_cached_in_bf16(backend: TransformersBackend) -> None:
    """Under autocast the rotary embedding gives float32 keys and the projection bf16 values; the cache holds both
    in bf16 (what attention reads them in) and samples what the appending loop samples under the same autocast."""
    sampling = SamplingParams(max_new_tokens=12)
    ids, mask = _rows(backend, 3)
    decoder = StaticDecoder(backend.model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(4)
        theirs = decode.sample(backend.model, ids, mask, decode_cache(), sampling, [10**6], backend.pad_token_id)
        torch.manual_seed(4)
        ours = decoder.sample(ids, mask, sampling, [10**6], backend.pad_token_id)
    (cache,) = decoder._caches.values()
    assert (
        {layer.keys.dtype for layer in cache.layers}
        == {layer.values.dtype for layer in cache.layers}
        == {torch.bfloat16}
    )
    assert float((ours == theirs).float().mean()) >= 0.9
