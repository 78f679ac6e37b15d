"""Rollout tokens per second: the vLLM backend against the transformers backend, same model, prompts and batch.

Both are the trainer's own backends (:class:`trainer.rollout.transformers_backend.TransformersBackend`,
:class:`trainer.rollout.vllm.VLLMBackend`) sampling the same prompts at temperature 1 on the same random tiny Qwen2,
in one process, with the same torch thread count. The measured rounds alternate between the backends (after one
warm-up round each), so a change in the machine's load hits both; it prints the median completion tokens per second
of each, the ratio vLLM / transformers, the engine's start-up time and the time of one in-memory weight sync (with
its proof: the largest probe log-prob difference after it). Say how loaded the machine was (``uptime``) next to the
figures.

Needs the vllm extra (its own virtual environment, see docs/trainer/vllm.md):

    python benchmarks/rollout_backends.py                   # CPU: 16 prompts x 8 completions x 48 tokens
    python benchmarks/rollout_backends.py --device cuda --hidden-size 896 --layers 24 --heads 14 --kv-heads 2 \\
        --intermediate-size 4864 --completion-length 256     # Qwen2-0.5B's shape on a GPU (random weights)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from trainer.rollout.base import GenerationBackend, SamplingParams  # noqa: E402
from trainer.rollout.transformers_backend import TransformersBackend  # noqa: E402
from trainer.tiny import build_tiny_model, build_tokenizer  # noqa: E402


def _prompts(n: int) -> list[str]:
    return [f"Compute {17 * i % 89 + 10} + {31 * i % 73 + 10}. Put the result in \\boxed{{}}.\n" for i in range(n)]


def _tokens_per_s(backend: GenerationBackend, prompts: list[str], args: argparse.Namespace) -> float:
    sampling = SamplingParams(max_new_tokens=args.completion_length, temperature=1.0)
    start = time.perf_counter()
    batch = backend.generate(prompts, args.generations, sampling)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return float(batch.completion_lengths.sum()) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per generate call")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--completion-length", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per backend, alternating")
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4, help="vLLM's CPU attention needs heads of 32 or more")
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate-size", type=int, default=None, help="default 4 x hidden size")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (both backends)")
    parser.add_argument(
        "--compile", action="store_true", help="let vLLM compile (torch.compile; CUDA graphs on GPU): eager otherwise"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from trainer.rollout import vllm as vllm_backend  # the vllm extra (imports vLLM after setting its environment)
    from trainer.rollout.vllm import EngineOptions, VLLMBackend

    prompts = _prompts(args.prompts)
    tokenizer = build_tokenizer(prompts * 4, vocab_size=512)
    model = build_tiny_model(
        tokenizer,
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        intermediate_size=args.intermediate_size,
        max_position_embeddings=128 + args.completion_length,
    ).to(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        hf = TransformersBackend(model, tokenizer)
        options = EngineOptions(
            model_path=tmp,
            max_model_len=128 + args.completion_length,
            max_batch_rows=args.prompts * args.generations,
            enforce_eager=not args.compile,
        )
        engine = VLLMBackend(model, tokenizer, options, probe_prompt=prompts[0])
        synced = engine.sync_weights()
        start = time.perf_counter()
        engine.sync_weights()
        sync_s = time.perf_counter() - start
        torch.manual_seed(0)
        _tokens_per_s(hf, prompts, args)  # warm-up rounds
        _tokens_per_s(engine, prompts, args)
        rates: dict[str, list[float]] = {"transformers": [], "vllm": []}
        for _ in range(args.rounds):
            rates["transformers"].append(_tokens_per_s(hf, prompts, args))
            rates["vllm"].append(_tokens_per_s(engine, prompts, args))
        engine.close()
    hf_rate, vllm_rate = statistics.median(rates["transformers"]), statistics.median(rates["vllm"])
    params = sum(p.numel() for p in model.parameters())
    mode = "compiled" if args.compile else "eager"
    print(
        f"model: random Qwen2, {params / 1e6:.1f}M parameters ({args.layers} layers, hidden {args.hidden_size}), "
        f"{args.device}, float32, {args.threads} torch thread(s); vllm {vllm_backend.vllm.__version__} ({mode}), "
        f"torch {torch.__version__}"
    )
    print(f"batch: {args.prompts} prompts x {args.generations} completions x {args.completion_length} tokens")
    for name, rate in (("transformers", hf_rate), ("vllm", vllm_rate)):
        print(f"{name:>12}: {rate:8.0f} completion tokens/s  (rounds: {', '.join(f'{r:.0f}' for r in rates[name])})")
    print(f"ratio vllm / transformers: {vllm_rate / hf_rate:.2f}")
    print(
        f"vllm engine start {engine.engine_start_s:.1f} s; one weight sync {sync_s * 1e3:.0f} ms "
        f"(probe log-prob difference after it {synced['rollout/weight_sync_logprob_diff']:.1e})"
    )


if __name__ == "__main__":
    main()
