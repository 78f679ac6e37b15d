"""CUDA paths: bf16 autocast, gradient checkpointing, generation in the update's dtype, a train step on a GPU.

Marked ``gpu``; skipped where ``torch.cuda.is_available()`` is false. ``benchmarks/gpu_check.sh`` runs them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.config import config_from_dict
from trainer.rollout.base import RolloutBatch, SamplingParams, completion_mask_from_ids
from trainer.rollout.forward import completion_log_probs
from trainer.rollout.static_decode import StaticDecoder
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.session import enable_activation_checkpointing
from trainer.stand_in import StandInServer
from trainer.train import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available())"),
]


def _bf16() -> contextlib.AbstractContextManager[Any]:
    return torch.autocast("cuda", dtype=torch.bfloat16)


def _cuda_model(path: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda()


def _sample(model: Any, path: Path, autocast: Any = contextlib.nullcontext) -> Any:
    backend = TransformersBackend(model, AutoTokenizer.from_pretrained(path), autocast=autocast)
    torch.manual_seed(0)
    return backend.generate(["What is 1 plus 2?", "What is 3 plus 4?"], 4, SamplingParams(max_new_tokens=8))


def test_bf16_log_probs_are_close_to_float32(tiny_model_dir: Path) -> None:
    model = _cuda_model(tiny_model_dir)
    batch = _sample(model, tiny_model_dir)
    mask = batch.completion_mask.bool()
    with torch.no_grad():
        fp32, _ = completion_log_probs(model, batch, 1.0)
        with _bf16():
            bf16, _ = completion_log_probs(model, batch, 1.0)
            bf16_chunked, _ = completion_log_probs(model, batch, 1.0, chunk_tokens=5)
    assert bf16.dtype == torch.float32 and bool(torch.isfinite(bf16).all())
    assert float((bf16 - fp32)[mask].abs().max()) < 0.1  # bf16 keeps ~3 significant digits of the logits
    torch.testing.assert_close(bf16_chunked[mask], bf16[mask], rtol=0, atol=2e-2)


def test_generation_runs_in_the_dtype_of_the_update(tiny_model_dir: Path) -> None:
    model = _cuda_model(tiny_model_dir)
    seen: list[torch.dtype] = []
    handle = model.lm_head.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    try:
        _sample(model, tiny_model_dir, autocast=_bf16)
        in_bf16 = set(seen)
        seen.clear()
        _sample(model, tiny_model_dir)
    finally:
        handle.remove()
    assert in_bf16 == {torch.bfloat16}
    assert set(seen) == {torch.float32}


def test_the_sampler_and_the_bf16_update_see_the_same_distribution(tiny_model_dir: Path) -> None:
    """With generation under the same autocast, the first ratio exp(logp_update - logp_sampler) is about 1."""
    model = _cuda_model(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tokenizer(["What is 1 plus 2?"] * 4, return_tensors="pt").to("cuda")
    torch.manual_seed(0)
    with torch.no_grad(), _bf16():
        out = model.generate(
            **ids, do_sample=True, max_new_tokens=8, output_logits=True, return_dict_in_generate=True, top_k=0
        )
    sampled = out.sequences[:, ids["input_ids"].shape[1] :]  # (4, C)
    logits = torch.stack(out.logits, dim=1).float()  # (4, C, V)
    sampler_logp = torch.log_softmax(logits, -1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)  # (4, C)
    backend = TransformersBackend(model, tokenizer, autocast=_bf16)
    mask, truncated = completion_mask_from_ids(sampled, backend.eos_token_ids)
    batch = RolloutBatch(
        prompt_ids=ids["input_ids"],
        prompt_mask=ids["attention_mask"],
        completion_ids=sampled,
        completion_mask=mask,
        is_truncated=truncated,
        prompt_index=torch.arange(4, device="cuda"),
        completion_texts=[""] * 4,
    )
    with torch.no_grad(), _bf16():
        update_logp, _ = completion_log_probs(model, batch, 1.0)
    diff = (update_logp - sampler_logp)[mask.bool()].abs()
    assert float(diff.mean()) < 0.02, float(diff.mean())


def test_the_decode_loop_draws_what_generate_draws_on_cuda(tiny_model_dir: Path) -> None:
    """On CUDA the loop reads "all rows ended?" only every few tokens; the steps it runs past the last EOS are cut
    off again. Half the vocabulary ends a row, so rows end early and at different steps."""
    model = _cuda_model(tiny_model_dir).eval()
    backend = TransformersBackend(model, AutoTokenizer.from_pretrained(tiny_model_dir), autocast=_bf16)
    backend.eos_token_ids = tuple(range(0, model.config.vocab_size, 2))
    prompts = ["What is 1 plus 2?", "What is 12 plus 3 plus 4?"]
    sampling = SamplingParams(max_new_tokens=40)
    torch.manual_seed(0)
    ours = backend.generate(prompts, 8, sampling)
    ids, mask = (t.repeat_interleave(8, 0).cuda() for t in backend.encode(prompts))
    torch.manual_seed(0)
    with torch.no_grad(), _bf16():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=backend._generation_config(sampling))
    theirs = out[:, ids.shape[1] :]
    their_mask, _ = completion_mask_from_ids(theirs, backend.eos_token_ids)
    width = int(their_mask.sum(-1).max())  # where the last row ended
    assert 1 < width < 40
    assert ours.completion_ids.shape[1] == width
    assert torch.equal(ours.completion_mask, their_mask[:, :width])
    kept = ours.completion_mask.bool()
    assert torch.equal(ours.completion_ids[kept], theirs[:, :width][kept])


def test_the_static_cache_loop_in_cuda_graphs_draws_the_eager_loops_tokens(tiny_model_dir: Path) -> None:
    """``cache_implementation: static`` on CUDA: the decode step compiled into CUDA graphs draws the tokens of the
    same loop run eagerly (float32, so that only kernel rounding can differ), over three calls: the first compiles,
    the others replay, and before the third the weights move in place (as an optimizer step moves them), which the
    replay must read. Then the backend runs it under bf16 autocast, rows ending at EOS."""
    model = _cuda_model(tiny_model_dir).eval()
    backend = TransformersBackend(
        model, AutoTokenizer.from_pretrained(tiny_model_dir), autocast=_bf16, cache_implementation="static"
    )
    eos = list(range(0, model.config.vocab_size, 3))
    prompts = ["What is 1 plus 2?", "What is 12 plus 3?"]
    ids, mask = (t.repeat_interleave(8, 0).cuda() for t in backend.encode(prompts))
    sampling = SamplingParams(max_new_tokens=24)
    compiled, eager = StaticDecoder(model), StaticDecoder(model, compile=False)
    assert compiled.compile
    for call in range(3):
        if call == 2:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.05)  # in place, as AdamW's step: the graph must read the new values
        draws = []
        for decoder in (compiled, eager):
            torch.manual_seed(call)
            draws.append(decoder.sample(ids, mask, sampling, eos, backend.pad_token_id, max_prompt_length=16))
        width = min(d.shape[1] for d in draws)
        assert width > 1
        same = float((draws[0][:, :width] == draws[1][:, :width]).float().mean())
        assert same >= 0.97, (call, same)
    assert backend.static is not None
    batch = backend.generate(prompts, 8, sampling)
    assert batch.completion_ids.shape[0] == 16 and batch.completion_mask.sum() > 0


def test_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir: Path) -> None:
    model = _cuda_model(tiny_model_dir)
    batch = _sample(model, tiny_model_dir)
    model.train()

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        logp, _ = completion_log_probs(model, batch, 1.0)
        (logp * batch.completion_mask).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    enable_activation_checkpointing(model)
    checkpointed = grads()
    assert sorted(checkpointed) == sorted(plain)
    for name, g in plain.items():
        torch.testing.assert_close(checkpointed[name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_two_steps_on_cuda_with_bf16_and_gradient_checkpointing(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg = config_from_dict(
        {
            "model_name_or_path": str(tiny_model_dir),
            "train_data": str(prompt_files[0]),
            "output_dir": str(tmp_path / "run"),
            "max_steps": 2,
            "prompt_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 8,
            "learning_rate": 1e-2,
            "beta": 0.04,
            "num_iterations": 2,
            "device": "cuda",
            "bf16": True,
            "gradient_checkpointing": True,
            "progress_bar": False,
            "report_to_tensorboard": False,
        }
    )
    result = train(cfg, scorer=StandInServer(lambda item: float(len(item["response"]) % 2)).scorer())
    for row in result.history:
        assert all(torch.isfinite(torch.tensor(row[k])) for k in ("loss/policy", "loss/kl", "optim/grad_norm"))
    after = AutoModelForCausalLM.from_pretrained(result.checkpoint)
    assert next(after.parameters()).dtype == torch.float32  # master weights stay float32
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert any(not torch.equal(v, before[k]) for k, v in after.state_dict().items())
