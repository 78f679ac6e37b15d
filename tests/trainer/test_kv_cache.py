"""The decode cache (trainer/rollout/kv_cache.py): transformers' DynamicCache, appending in place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from trainer.rollout.base import SamplingParams
from trainer.rollout.kv_cache import AppendingLayer, decode_cache
from trainer.rollout.transformers_backend import TransformersBackend


def _kv(b: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, 2, t, 8), torch.randn(b, 2, t, 8)  # (B, H, T, D)


def test_appending_holds_what_concatenation_holds_and_copies_only_to_grow() -> None:
    torch.manual_seed(0)
    ours, theirs = decode_cache(), DynamicCache()
    pointers = []
    steps = [_kv(3, 5)] + [_kv(3, 1) for _ in range(70)]  # a 5-token prefill, then 70 decoding steps
    for k, v in steps:
        got = ours.update(k, v, 0)
        want = theirs.update(k, v, 0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        pointers.append(got[0].data_ptr())
    assert type(ours.layers[0]) is AppendingLayer
    assert ours.get_seq_length() == theirs.get_seq_length() == 75
    # One buffer of 64 positions (2 x 5 is below the minimum) until the 65th token, then one of 2 x 65 = 130.
    assert pointers[:60] == [pointers[0]] * 60 and pointers[60:] == [pointers[60]] * 11 and pointers[60] != pointers[0]
    assert ours.layers[0]._key_buffer.shape == (3, 2, 130, 8)


def test_crop_and_batch_operations_keep_the_cache_right() -> None:
    torch.manual_seed(1)
    ours, theirs = decode_cache(), DynamicCache()
    steps = [_kv(2, 4)] + [_kv(2, 1) for _ in range(3)]
    for cache in (ours, theirs):
        for k, v in steps:
            cache.update(k, v, 0)
        cache.crop(-2)  # drop the last two: the next token overwrites the buffer past position 5
        cache.batch_repeat_interleave(3)  # (2, ...) -> (6, ...): a new tensor, copied into a new buffer next
    k, v = _kv(6, 1)
    got, want = ours.update(k, v, 0), theirs.update(k, v, 0)
    assert got[0].shape == (6, 2, 6, 8)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_prefilled_cache_becomes_an_appending_one() -> None:
    cache = DynamicCache()
    cache.update(*_kv(1, 3), 0)
    cache.update(*_kv(1, 3), 1)
    assert decode_cache(cache) is cache
    assert [type(layer) for layer in cache.layers] == [AppendingLayer, AppendingLayer]
    cache.update(*_kv(1, 3), 2)  # a layer added later appends in place too
    assert type(cache.layers[2]) is AppendingLayer


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_samples_what_generates_own_cache_samples(
    tiny_model_dir: Path, share: bool, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    backend = TransformersBackend(model, tokenizer, apply_chat_template=False, share_prompts=share)
    prompts = ["What is 1 plus 2?", "What is 12 plus 3 plus 4?"]  # different lengths: one is left-padded
    sampling = SamplingParams(max_new_tokens=70, temperature=temperature)  # past the first buffer's 64 positions
    appends: list[int] = []
    update = AppendingLayer.update
    monkeypatch.setattr(AppendingLayer, "update", lambda self, *a, **k: appends.append(1) or update(self, *a, **k))
    torch.manual_seed(5)
    ours = backend.generate(prompts, 3, sampling)
    assert len(appends) >= 70 * model.config.num_hidden_layers  # generation decoded with the appending cache
    ids, mask = backend.encode(prompts)
    config = backend._generation_config(sampling)
    torch.manual_seed(5)
    out = model.generate(
        input_ids=ids.repeat_interleave(3, 0), attention_mask=mask.repeat_interleave(3, 0), generation_config=config
    )  # transformers' own DynamicCache
    theirs = out[:, ids.shape[1] :]
    n = ours.completion_ids.shape[1]
    assert n == theirs.shape[1]
    assert torch.equal(
        ours.completion_ids.masked_fill(ours.completion_mask == 0, 0), theirs.masked_fill(ours.completion_mask == 0, 0)
    )
