"""Chunked log-probs: the same log-probs, entropies and gradients as the full logits, at a fraction of the memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from trainer.rollout.base import RolloutBatch
from trainer.rollout.forward import completion_log_probs
from trainer.session import enable_activation_checkpointing


def _batch(vocab: int, n: int, p: int, c: int, seed: int = 0) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    prompt_mask = torch.ones(n, p, dtype=torch.long)
    prompt_mask[0, :2] = 0  # a left-padded prompt
    completion_mask = torch.ones(n, c, dtype=torch.long)
    completion_mask[1, c // 2 :] = 0  # a completion that ended early
    return RolloutBatch(
        prompt_ids=torch.randint(vocab, (n, p), generator=g),
        prompt_mask=prompt_mask,
        completion_ids=torch.randint(vocab, (n, c), generator=g),
        completion_mask=completion_mask,
        is_truncated=torch.zeros(n, dtype=torch.bool),
        prompt_index=torch.arange(n),
        completion_texts=[""] * n,
    )


def _assert_same_grads(grads: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """The same parameters got gradients, equal to float rounding: fp32 sums in another order can move an element
    near zero by ~1e-7 absolute, so the absolute tolerance follows each tensor's own scale (1e-5 of its largest
    entry) rather than a fixed 1e-7."""
    assert sorted(grads) == sorted(expected)
    for name, grad in expected.items():
        atol = max(1e-5 * grad.abs().max().item(), 1e-9)
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=atol, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("chunk_tokens", [1, 7, 64, 10_000])  # one token, uneven, one row, more than all
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_log_probs_equal_the_full_logits_path(
    tiny_model_dir: Path, chunk_tokens: int, temperature: float
) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(model.config.vocab_size, n=3, p=5, c=9)
    mask = batch.completion_mask.float()

    def run(chunk: int | None) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp, entropy = completion_log_probs(model, batch, temperature, with_entropy=True, chunk_tokens=chunk)
        ((logp * mask).sum() * 0.3).backward()
        assert entropy is not None
        return logp.detach(), entropy, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    full_logp, full_entropy, full_grads = run(None)
    logp, entropy, grads = run(chunk_tokens)
    assert logp.shape == entropy.shape == (3, 9)
    torch.testing.assert_close(logp, full_logp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(entropy, full_entropy, rtol=1e-5, atol=1e-6)
    _assert_same_grads(grads, full_grads)


@pytest.mark.parametrize("chunk_tokens", [1, 7, 10_000])
def test_entropies_with_grad_equal_the_full_logits_path(tiny_model_dir: Path, chunk_tokens: int) -> None:
    """``entropy_grad`` (the ``entropy_coeff`` bonus): the chunked head's entropies carry the same gradient."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(model.config.vocab_size, n=3, p=5, c=9)
    mask = batch.completion_mask.float()

    def run(chunk: int | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp, entropy = completion_log_probs(model, batch, 0.7, chunk_tokens=chunk, entropy_grad=True)
        assert entropy is not None and entropy.requires_grad
        ((logp * mask).sum() * 0.3 - (entropy * mask).sum() * 0.7).backward()
        return entropy.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    full_entropy, full_grads = run(None)
    entropy, grads = run(chunk_tokens)
    torch.testing.assert_close(entropy, full_entropy, rtol=1e-5, atol=1e-6)
    _assert_same_grads(grads, full_grads)
    # the entropy's own gradient is in there: without it the head's gradient differs
    model.zero_grad(set_to_none=True)
    logp, _ = completion_log_probs(model, batch, 0.7, chunk_tokens=chunk_tokens)
    ((logp * mask).sum() * 0.3).backward()
    head = next(k for k in full_grads if "lm_head" in k or "embed_tokens" in k)
    assert not torch.allclose(dict(model.named_parameters())[head].grad, full_grads[head])


def _grouped_batch(vocab: int, groups: int, g: int, p: int, c: int) -> RolloutBatch:
    """``groups`` prompts x ``g`` completions, laid out as generation lays them out: a group's rows consecutive,
    sharing the prompt's ids and left padding. The first prompt is padded; two completions end early."""
    one = _batch(vocab, n=groups, p=p, c=c)
    rows = torch.arange(groups).repeat_interleave(g)  # (N,)
    completion_ids = torch.randint(vocab, (groups * g, c), generator=torch.Generator().manual_seed(1))
    completion_mask = torch.ones(groups * g, c, dtype=torch.long)
    completion_mask[1, c // 2 :] = 0
    completion_mask[-1, 1:] = 0
    return RolloutBatch(
        prompt_ids=one.prompt_ids[rows],
        prompt_mask=one.prompt_mask[rows],
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        is_truncated=torch.zeros(groups * g, dtype=torch.bool),
        prompt_index=rows,
        completion_texts=[""] * (groups * g),
    )


def _embedding_inputs(model: torch.nn.Module) -> list[tuple[int, ...]]:
    """The shapes of the token ids each forward of ``model`` embeds, recorded from now on."""
    shapes: list[tuple[int, ...]] = []
    model.get_input_embeddings().register_forward_pre_hook(lambda m, args: shapes.append(tuple(args[0].shape)))
    return shapes


@pytest.mark.parametrize(
    ("chunk_tokens", "entropy_grad", "top_k"), [(None, False, 0), (7, False, 0), (7, True, 0), (None, True, 5)]
)
def test_shared_prompt_forward_equals_the_full_forward(
    tiny_model_dir: Path, chunk_tokens: int | None, entropy_grad: bool, top_k: int
) -> None:
    """Each prompt runs once (3 rows, not 12) and the completions on its copied KV cache: the same log-probs,
    entropies and gradients as running all 12 rows whole."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _grouped_batch(model.config.vocab_size, groups=3, g=4, p=5, c=9)
    mask = batch.completion_mask.float()
    shapes = _embedding_inputs(model)

    def run(share: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp, entropy = completion_log_probs(
            model,
            batch,
            0.7,
            with_entropy=True,
            chunk_tokens=chunk_tokens,
            top_k=top_k,
            entropy_grad=entropy_grad,
            share_prompts=share,
        )
        assert entropy is not None
        loss = (logp * mask).sum() * 0.3 - ((entropy * mask).sum() * 0.7 if entropy_grad else 0.0)
        loss.backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        return logp.detach(), entropy.detach(), grads

    full_logp, full_entropy, full_grads = run(False)
    assert shapes == [(12, 14)]
    logp, entropy, grads = run(True)
    assert shapes[1:] == [(3, 5), (12, 8)]  # the prompts once, then the completions but their last token
    torch.testing.assert_close(logp, full_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, full_entropy, rtol=1e-5, atol=1e-5)
    _assert_same_grads(grads, full_grads)


def test_shared_prompt_forward_falls_back_where_it_does_not_apply(tiny_model_dir: Path) -> None:
    """Distinct prompts, and gradient checkpointing (no KV cache in training), take the full forward."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    shapes = _embedding_inputs(model)
    completion_log_probs(model, _batch(model.config.vocab_size, n=3, p=5, c=9), 1.0, share_prompts=True)
    assert shapes == [(3, 14)]
    enable_activation_checkpointing(model)
    model.train()
    completion_log_probs(
        model, _grouped_batch(model.config.vocab_size, groups=2, g=2, p=5, c=9), 1.0, share_prompts=True
    )
    assert shapes[1:] == [(4, 14)]


def test_without_grad_the_chunked_path_keeps_nothing_for_backward(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = _batch(model.config.vocab_size, n=2, p=3, c=4)
    with torch.no_grad():
        logp, _ = completion_log_probs(model, batch, 1.0, chunk_tokens=3)
    assert logp.grad_fn is None
    assert not model.lm_head._forward_hooks and not model.lm_head._forward_pre_hooks  # the hooks are removed


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of the tensor storages created inside (and still alive), checked after every op, backward ops
    and checkpoint recomputation included: what the computation itself holds, whatever the allocator keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                self.live.setdefault(storage.data_ptr(), (StorageWeakRef(storage), storage.nbytes()))
        self.peak_bytes = max(self.peak_bytes, sum(n for _, n in self.live.values()))
        return out


def _peak_mb(model: torch.nn.Module, batch: RolloutBatch, chunk_tokens: int | None) -> float:
    model.zero_grad(set_to_none=True)
    with PeakTensorMemory() as meter:
        logp, _ = completion_log_probs(model, batch, 0.9, with_entropy=True, chunk_tokens=chunk_tokens)
        (logp * batch.completion_mask).sum().backward()
    return meter.peak_bytes / 2**20


def test_chunked_log_probs_bound_peak_memory_at_a_large_vocabulary() -> None:
    vocab, n, c = 32_768, 4, 256
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    batch = _batch(vocab, n=n, p=4, c=c)
    one_copy_mb = n * (c + 1) * vocab * 4 / 2**20  # the (N, C + 1, V) float32 logits: 128.5 MB
    full = _peak_mb(model, batch, None)
    chunked = _peak_mb(model, batch, 128)  # a chunk's logits: 128 x 32k floats, 16 MB
    # The full path holds the logits several times over (the head's output, the scaled copy kept for backward,
    # the entropy's temporaries, the gradient); the chunked one a few chunks' worth, whatever N and C.
    assert full > 2.5 * one_copy_mb, (full, one_copy_mb)
    assert chunked < 0.6 * one_copy_mb, (chunked, one_copy_mb)
    assert _peak_mb(model, _batch(vocab, n=2 * n, p=4, c=c), 128) < 0.6 * one_copy_mb  # twice the batch: no more
