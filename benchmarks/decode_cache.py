"""Generation three ways on the same model, prompts and seed, in alternating rounds: ``model.generate`` with
transformers' own ``DynamicCache`` (the baseline), ``model.generate`` with the appending decode cache
(``trainer/rollout/kv_cache.py``), and the trainer's decode loop with that cache (``trainer/rollout/decode.py``,
what ``TransformersBackend.generate`` runs). Prints each side's median seconds per call and its ratio to the
baseline (above 1: faster), with the load average.

    python benchmarks/decode_cache.py                     # the TRL pair's model: 2.3M Qwen2, 128 rows x 48 tokens
    python benchmarks/decode_cache.py --completion-length 256 --rounds 3

All three sample the same tokens (checked each round). The end-of-sequence id is one past the vocabulary, which no
row can draw, so that every row runs the full length and all sides decode the same number of steps.
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

from trainer.rollout.base import SamplingParams
from trainer.rollout.decode import sample
from trainer.rollout.forward import cache_keyword
from trainer.rollout.kv_cache import decode_cache

SIDES = ("generate, DynamicCache", "generate, appending cache", "decode loop, appending cache")


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

    def run(side: str) -> tuple[float, torch.Tensor]:
        torch.manual_seed(1)
        start = time.perf_counter()
        with torch.no_grad():
            if side == SIDES[2]:
                sampling = SamplingParams(max_new_tokens=n)
                out = sample(model, ids, mask, decode_cache(), sampling, [never], tokenizer.pad_token_id)
            else:
                cache = {cache_keyword(model): decode_cache()} if side == SIDES[1] else {}
                generated = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **cache)
                out = generated[:, ids.shape[1] :]
        return time.perf_counter() - start, out

    load = os.getloadavg()[0]
    for side in SIDES:
        run(side)  # warm-up
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(args.rounds):
        reference = None
        for side in SIDES:
            seconds, out = run(side)
            times[side].append(seconds)
            if reference is not None and not torch.equal(out, reference):
                raise SystemExit(f"decode_cache: {side} sampled other tokens than {SIDES[0]}")
            reference = out
    print(
        f"{len(ids)} rows x {n} tokens, {args.rounds} rounds, torch {torch.__version__}, load {load:.2f} -> "
        f"{os.getloadavg()[0]:.2f}"
    )
    base = statistics.median(times[SIDES[0]])
    for side in SIDES:
        median = statistics.median(times[side])
        print(f"{side:<30} {median:.3f} s   x{base / median:.2f}")


if __name__ == "__main__":
    main()
