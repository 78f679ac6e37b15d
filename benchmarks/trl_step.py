"""TRL's ``GRPOTrainer`` on the model, batch and lengths of ``trainer_step.py``: completion tokens per second.

The peer baseline for ``benchmarks/gpu_check.sh``. It builds the same random tiny Qwen2 as ``trainer_step.py``
for the same shape options (same seed, same tokenizer), gives TRL the same prompts, ``num_generations``,
``max_completion_length``, sampling (temperature 1, no top-p/top-k), ``beta``, ``num_iterations``, ``loss_type``
dapo and one micro-batch per step (TRL's ``per_device_train_batch_size`` counts completions), and the same
in-process reward rule as ``trainer_step.py --rewards stand-in``. A step is one generation batch and its
``num_iterations`` optimizer steps (TRL counts each optimizer step as a step; they are summed here), as in
``trainer_step.py``. Tokens per second are the batch's completion tokens over that time, the first batch left out,
median over batches: what ``trainer_step.py`` reports as ``perf/tokens_per_s``.

Needs ``trl`` (its own environment: ``pip install trl``); prints a clear line and exits 3 when it is missing.

    python benchmarks/trl_step.py --device cuda --hidden-size 896 --layers 24 --heads 14 --kv-heads 2 \\
        --intermediate-size 4864 --vocab-size 151936 --completion-length 256 --json trl.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from trainer_step import _prompts, add_shape_arguments, build_model, stand_in_reward  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_shape_arguments(parser)
    args = parser.parse_args()
    try:
        import trl
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    except ImportError as exc:
        print(f"trl_step: TRL is not installed ({exc}); pip install trl to compare against GRPOTrainer")
        raise SystemExit(3) from exc
    import torch

    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())

    class StepTimes(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.ends: list[float] = [time.perf_counter()]

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.ends.append(time.perf_counter())

    def reward(completions: list[str], **kwargs: Any) -> list[float]:
        return [stand_in_reward(c) for c in completions]

    with tempfile.TemporaryDirectory(prefix="rlvr-trl-") as tmp:
        root = Path(tmp)
        rows = _prompts(args.prompts * (args.steps + 1))
        if args.data is not None:
            rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
        model_dir = args.model or root / "model"
        if args.model is None:
            build_model(args, rows, model_dir)
        n = args.prompts * args.generations
        config = trl.GRPOConfig(
            output_dir=str(root / "out"),
            per_device_train_batch_size=n,  # completions per step, one micro-batch, as trainer_step's default
            gradient_accumulation_steps=1,
            num_generations=args.generations,
            max_completion_length=args.completion_length,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=args.beta,
            num_iterations=args.num_iterations,
            loss_type="dapo",
            learning_rate=1e-5,
            max_steps=(args.steps + 1) * args.num_iterations,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            gradient_checkpointing=args.gradient_checkpointing,  # TRL turns it on by default; ours is off
            bf16=cuda,
            use_cpu=not cuda,
            seed=0,
            shuffle_dataset=False,
            disable_dropout=True,
        )
        timer = StepTimes()
        trainer = trl.GRPOTrainer(
            model=str(model_dir),
            reward_funcs=reward,
            args=config,
            train_dataset=Dataset.from_list([{"prompt": r["prompt"]} for r in rows]),
            processing_class=AutoTokenizer.from_pretrained(model_dir),
            callbacks=[timer],
        )
        trainer.train()
        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
    # TRL logs completion lengths once per generation batch, and ends a step at each of its num_iterations updates
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    ends = timer.ends[:: args.num_iterations]
    step_s = [b - a for a, b in itertools.pairwise(ends)]
    tokens_per_s = [mean * n / s for mean, s in zip(lengths[1:], step_s[1:], strict=False)]
    summary = {
        "trl": trl.__version__,
        "parameters": n_params,
        "step_s": statistics.median(step_s[1:]),
        "tokens_per_s": statistics.median(tokens_per_s),
    }
    print(
        f"TRL {trl.__version__} GRPOTrainer: {n_params / 1e6:.1f}M parameters on {'cuda' if cuda else 'cpu'}; "
        f"{args.prompts} prompts x {args.generations} completions of <= {args.completion_length} tokens per step; "
        f"median of {len(tokens_per_s)} steps: {summary['step_s']:.2f} s/step, {summary['tokens_per_s']:.0f} tokens/s"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
