"""Generation with the appending decode cache (``trainer/rollout/kv_cache.py``) against transformers' own
``DynamicCache``: the same model, prompts and seed, alternating rounds; prints each side's seconds per ``generate``
call and the ratio (above 1: the appending cache is faster), with the load average.

    python benchmarks/decode_cache.py                     # the TRL pair's model: 2.3M Qwen2, 128 rows x 48 tokens
    python benchmarks/decode_cache.py --completion-length 256 --rounds 3

Both sides sample the same tokens (checked each round); ``min_new_tokens`` keeps every row to the full length so
that both decode the same number of steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_step import _prompts, build_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from trainer.rollout.forward import cache_keyword
from trainer.rollout.kv_cache import decode_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion-length", type=int, default=48)
    parser.add_argument("--hidden-size", type=int, default=192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    args.intermediate_size, args.vocab_size = None, None  # build_model's defaults, as trainer_step.py's
    torch.set_num_threads(args.threads)
    rows = _prompts(args.prompts)
    with tempfile.TemporaryDirectory(prefix="rlvr-decode-") as tmp:
        build_model(args, rows, Path(tmp))  # the random tiny Qwen2 of trainer_step.py and trl_step.py
        model = AutoModelForCausalLM.from_pretrained(tmp)
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    model.eval()
    tokenizer.padding_side = "left"
    texts = [r["prompt"] for r in rows]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    ids = enc["input_ids"].repeat_interleave(args.generations, 0)  # (N, P)
    mask = enc["attention_mask"].repeat_interleave(args.generations, 0)  # (N, P)
    n = args.completion_length
    config = GenerationConfig(
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )

    def generate(appending: bool) -> tuple[float, torch.Tensor]:
        cache = {cache_keyword(model): decode_cache()} if appending else {}
        torch.manual_seed(1)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **cache)
        return time.perf_counter() - start, out

    load = os.getloadavg()[0]
    generate(True), generate(False)  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        seconds, reference = generate(False)
        times[False].append(seconds)
        seconds, out = generate(True)
        times[True].append(seconds)
        if not torch.equal(out, reference):
            raise SystemExit("decode_cache: the two caches sampled different tokens")
    ours, theirs = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"{len(ids)} rows x {n} tokens, {args.rounds} rounds, torch {torch.__version__}, load {load:.2f} -> "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(f"DynamicCache (torch.cat) {theirs:.3f} s   appending {ours:.3f} s   ratio x{theirs / ours:.2f}")


if __name__ == "__main__":
    main()
