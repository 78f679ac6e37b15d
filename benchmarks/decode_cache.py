"""Generation four ways on the same model, prompts and seed, in alternating rounds: ``model.generate`` with
transformers' own ``DynamicCache`` (the baseline), ``model.generate`` with the appending decode cache
(``trainer/rollout/kv_cache.py``), the trainer's decode loop with that cache (``trainer/rollout/decode.py``,
what ``TransformersBackend.generate`` runs), and the decode loop over a static cache
(``trainer/rollout/static_decode.py``, ``cache_implementation: static``: each token one CUDA graph replay on a GPU,
compiled in the warm-up call; eager on a CPU). Prints each side's median seconds per call and its ratio to the
baseline (above 1: faster), with the load average.

    python benchmarks/decode_cache.py                     # the TRL pair's model: 2.3M Qwen2, 128 rows x 48 tokens
    python benchmarks/decode_cache.py --completion-length 256 --rounds 3
    # Qwen2-0.5B's shape on a GPU under bf16 autocast (benchmarks/gpu_check.sh runs this):
    python benchmarks/decode_cache.py --device cuda --bf16 --hidden-size 896 --layers 24 --heads 14 --kv-heads 2 \
        --intermediate-size 4864 --vocab-size 151936 --completion-length 256 --rounds 3

On a CPU all three sample the same tokens (checked each round; the script fails otherwise). On a GPU they need not
agree bitwise: a kernel's rounding may depend on the cache's memory layout, and at temperature 1 over a random
model's near-uniform logits one rounding difference changes a draw and every token after it. There the share of
tokens equal to the baseline's is printed instead (``tests/trainer/test_gpu.py`` checks equal tokens on a small
model). The end-of-sequence id is one past the vocabulary, which no row can draw, so that every row runs the full
length and all sides decode the same number of steps.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_step import _prompts, add_batch_and_model_arguments, build_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from trainer.rollout.base import SamplingParams
from trainer.rollout.decode import sample
from trainer.rollout.forward import cache_keyword
from trainer.rollout.kv_cache import decode_cache
from trainer.rollout.static_decode import StaticDecoder

SIDES = (
    "generate, DynamicCache",
    "generate, appending cache",
    "decode loop, appending cache",
    "decode loop, static cache",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_batch_and_model_arguments(parser)  # trainer_step.py's, for the same model and batch
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="decode under bf16 autocast, as the trainer on a GPU")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = _prompts(args.prompts)
    with tempfile.TemporaryDirectory(prefix="rlvr-decode-") as tmp:
        build_model(args, rows, Path(tmp))  # the random tiny Qwen2 of trainer_step.py and trl_step.py
        model = AutoModelForCausalLM.from_pretrained(tmp).to(args.device)
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    model.eval()
    tokenizer.padding_side = "left"
    texts = [r["prompt"] for r in rows]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    ids = enc["input_ids"].repeat_interleave(args.generations, 0).to(args.device)  # (N, P)
    mask = enc["attention_mask"].repeat_interleave(args.generations, 0).to(args.device)  # (N, P)
    autocast = (
        (lambda: torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16))
        if args.bf16
        else contextlib.nullcontext
    )
    n = args.completion_length
    never = model.config.vocab_size  # an end-of-sequence id no row can draw: every row runs n tokens
    config = GenerationConfig(
        max_new_tokens=n,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=never,
    )

    static = StaticDecoder(model)  # compiled (CUDA graphs) on a GPU; the first call, a warm-up, compiles

    def run(side: str) -> tuple[float, torch.Tensor]:
        torch.manual_seed(1)
        _synchronize(args.device)
        start = time.perf_counter()
        with torch.no_grad(), autocast():
            if side == SIDES[2]:
                sampling = SamplingParams(max_new_tokens=n)
                out = sample(model, ids, mask, decode_cache(), sampling, [never], tokenizer.pad_token_id)
            elif side == SIDES[3]:
                sampling = SamplingParams(max_new_tokens=n)
                out = static.sample(ids, mask, sampling, [never], tokenizer.pad_token_id)
            else:
                cache = {cache_keyword(model): decode_cache()} if side == SIDES[1] else {}
                generated = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **cache)
                out = generated[:, ids.shape[1] :]
        _synchronize(args.device)
        return time.perf_counter() - start, out

    load = os.getloadavg()[0]
    for side in SIDES:
        run(side)  # warm-up
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    same: dict[str, list[float]] = {side: [] for side in SIDES}  # share of tokens equal to the baseline's
    for _ in range(args.rounds):
        reference = None
        for side in SIDES:
            seconds, out = run(side)
            times[side].append(seconds)
            reference = out if reference is None else reference
            same[side].append(float((out == reference).float().mean()) if out.shape == reference.shape else 0.0)
    if args.device == "cpu" and any(share < 1.0 for shares in same.values() for share in shares):
        raise SystemExit(f"decode_cache: a side sampled other tokens than {SIDES[0]}: {same}")
    print(
        f"{len(ids)} rows x {n} tokens, {args.rounds} rounds, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
        f"parameters on {args.device}{' (bf16 autocast)' if args.bf16 else ''}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, load {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    base = statistics.median(times[SIDES[0]])
    for side in SIDES:
        median = statistics.median(times[side])
        print(f"{side:<30} {median:.3f} s   x{base / median:.2f}   same tokens {min(same[side]):.1%}")


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
