"""TRL's GRPOTrainer scored by the reward server, on a tiny model this script builds (CPU, nothing downloaded).

    python -m reward_server &                                   # the server, on 127.0.0.1:8000
    RLVR_SERVER_URL=http://127.0.0.1:8000 python examples/trl/grpo_trl.py --max-steps 3

One reward function per component (``rlvr_client.trl.reward_functions``): TRL logs each one's mean as
``rewards/rlvr_<component>/mean`` and sums them with ``GRPOConfig(reward_weights=[...])`` (``GRPOTrainer`` itself
takes no ``reward_weights``). The functions of one step share one request to the server. A completion the server
cannot score is ``None`` in every function, which TRL leaves out of its group's baseline.

The model is a randomly initialised 1M-parameter Qwen2 with a byte-level BPE tokenizer trained on the prompts
(``trainer/tiny.py``): it shows the wiring, not learning. Swap in ``model="Qwen/Qwen2.5-0.5B-Instruct"`` for a
real run. Run it from the repository root (it imports ``trainer.tiny``; set ``PYTHONPATH=.``).
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from rlvr_client import client_from_env, reward_functions
from trainer.tiny import build_tiny_model, build_tokenizer

#: The server scores each component at weight 1; TRL weights them (and sums them) with ``reward_weights``.
COMPONENTS: dict[str, Any] = {"accuracy": 1.0, "format": 1.0, "language": 1.0}
REWARD_WEIGHTS = [1.0, 0.5, 0.25]


def arithmetic_dataset(n: int, seed: int = 0) -> Dataset:
    """Two-number sums with their answers, in TRL's standard (non-chat) format: ``prompt`` and ``solution``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"prompt": f"What is {a} + {b}? Think in <think></think>, then answer.", "solution": str(a + b)})
    return Dataset.from_list(rows)


def build_trainer(output_dir: str, max_steps: int, seed: int = 0) -> GRPOTrainer:
    """The trainer: tiny model, arithmetic prompts, the server's per-component rewards weighted by TRL."""
    dataset = arithmetic_dataset(64, seed)
    tokenizer = build_tokenizer(
        [row["prompt"] + " <think>12 + 30 = 42</think> 42" for row in dataset],
        vocab_size=400,
        extra_tokens=["<think>", "</think>"],
    )
    model = build_tiny_model(tokenizer, seed=seed)
    config = GRPOConfig(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=4,
        num_generations=4,  # a group of 4 completions per prompt
        max_completion_length=24,
        learning_rate=1e-4,
        reward_weights=REWARD_WEIGHTS,  # in the order of COMPONENTS
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
    )
    return GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward_functions(client_from_env(), components=COMPONENTS, ground_truth_column="solution"),
        args=config,
        train_dataset=dataset,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/trl-grpo")
    parser.add_argument("--max-steps", type=int, default=3)
    args = parser.parse_args()
    trainer = build_trainer(args.output_dir, args.max_steps)
    trainer.train()
    for entry in trainer.state.log_history:
        if "reward" in entry:
            parts = ", ".join(
                f"{k.split('/')[1]} {v:.3f}"
                for k, v in entry.items()
                if k.endswith("/mean") and k.startswith("rewards/")
            )
            print(f"step {entry['step']}: reward {entry['reward']:.3f} ({parts})")


if __name__ == "__main__":
    main()
