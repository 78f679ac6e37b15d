"""How much of a GRPO step waits on rewards, with scoring overlapped with generation and without.

Runs the real trainer in two modes on the same model (a random tiny Qwen2 unless ``--model``) and prompts, against
a live reward server (``python -m reward_server``, started here unless ``--url`` names a running one):

* ``overlap``: each chunk of groups is scored while the next chunk generates (the trainer's default);
* ``no-overlap``: the same chunks, but the loop blocks on each chunk's rewards before generating the next.

It prints, per mode, the median step time, the reward wait and its share of the step (goal: <= 5 % with overlap),
and completion tokens per second, then the ratios overlap / no-overlap. The first step of each run is a warm-up
and is left out; the modes alternate over ``--rounds`` runs and medians are printed, so a change in the machine's
load hits both. Figures still depend on that load: say how loaded the machine was.

With ``C`` chunks per step, overlap can hide at most ``(C - 1) / C`` of the scoring time: the last chunk is
scored after generation ends (behind the reference/old log-probs when ``beta > 0`` or ``num_iterations > 1``).

    python benchmarks/trainer_step.py                 # CPU, random tiny Qwen2, about two minutes
    python benchmarks/trainer_step.py --model examples/arithmetic/runs/sft \
        --data examples/arithmetic/runs/data/train.jsonl   # the example's warmed-up policy
    # Qwen2-0.5B's shape on GPU, its 151,936-token vocabulary included (random weights; the tokenizer is this
    # script's, and ids past it decode to nothing):
    python benchmarks/trainer_step.py --device cuda --hidden-size 896 --layers 24 --heads 14 --kv-heads 2 \
        --intermediate-size 4864 --vocab-size 151936 --completion-length 256 --math-workers 8

Options for throughput alone (``benchmarks/gpu_check.sh`` uses them): ``--modes overlap`` runs one mode,
``--rewards stand-in`` scores in-process with a length-parity rule instead of a server (no server dependencies
needed), ``--backend vllm`` samples with vLLM (``use_vllm: true``), ``--json FILE`` writes the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "clients"))  # the light client, rlvr_client

from transformers import AutoModelForCausalLM  # noqa: E402

from trainer.config import config_from_dict  # noqa: E402
from trainer.stand_in import StandInServer  # noqa: E402
from trainer.tiny import build_tiny_model, build_tokenizer  # noqa: E402
from trainer.train import train  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prompts(n: int) -> list[dict[str, Any]]:
    return [
        {"prompt": f"Compute {a} + {b}. Put the result in \\boxed{{}}.\n", "ground_truth": str(a + b), "task": "math"}
        for a, b in ((17 * i % 89 + 10, 31 * i % 73 + 10) for i in range(n))
    ]


def stand_in_reward(response: str) -> float:
    """The ``--rewards stand-in`` rule, shared with ``trl_step.py``: 1 for a completion of odd length in characters."""
    return float(len(response) % 2)


def build_model(args: argparse.Namespace, rows: list[dict[str, Any]], model_dir: Path) -> None:
    """The random tiny Qwen2 of these benchmarks (the same for the same arguments), saved to ``model_dir``."""
    tokenizer = build_tokenizer([r["prompt"] + r["ground_truth"] for r in rows], vocab_size=384)
    model = build_tiny_model(
        tokenizer,
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        intermediate_size=args.intermediate_size,
    )
    if args.vocab_size and args.vocab_size > len(tokenizer):
        model.resize_token_embeddings(args.vocab_size, mean_resizing=False)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)


def add_batch_and_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The batch (prompts, completions per prompt, their length) and the random model's shape (:func:`build_model`),
    shared with ``trl_step.py`` and ``decode_cache.py``."""
    parser.add_argument("--prompts", type=int, default=16, help="prompt_batch_size")
    parser.add_argument("--generations", type=int, default=8, help="num_generations")
    parser.add_argument("--completion-length", type=int, default=48)
    parser.add_argument("--hidden-size", type=int, default=192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate-size", type=int, default=None, help="default 4 x hidden size")
    parser.add_argument("--vocab-size", type=int, default=None, help="pad the embedding to this many tokens")


def add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The batch and model options that ``trl_step.py`` shares, so both measure the same thing."""
    parser.add_argument("--steps", type=int, default=5, help="measured steps per run (plus one warm-up step)")
    add_batch_and_model_arguments(parser)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient (> 0 adds the reference forward)")
    parser.add_argument("--num-iterations", type=int, default=1, help="optimizer steps per generation batch")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the trainer")
    parser.add_argument("--model", type=Path, help="a HF model directory instead of a random tiny Qwen2")
    parser.add_argument("--data", type=Path, help="prompt JSONL for --model (default: generated sums)")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations (CUDA)")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON to this file")


def _run(mode: str, args: argparse.Namespace, model_dir: Path, data: Path, url: str, out: Path) -> list[dict[str, Any]]:
    """One training run in ``mode``; returns the metrics of its measured steps."""
    extra = {"use_vllm": True} if args.backend == "vllm" else {}
    cfg = config_from_dict(
        {
            **extra,
            "model_name_or_path": str(model_dir),
            "train_data": str(data),
            "output_dir": str(out),
            "reward_server_urls": [url],
            "max_steps": args.steps + 1,
            "prompt_batch_size": args.prompts,
            "num_generations": args.generations,
            "rollout_chunk_prompts": args.chunk,
            "overlap_scoring": mode == "overlap",
            "max_completion_length": args.completion_length,
            "beta": args.beta,
            "num_iterations": args.num_iterations,
            "apply_chat_template": False,  # plain-text prompts, as trl_step.py gives TRL
            "learning_rate": 1e-5,
            "report_to_tensorboard": False,
            "progress_bar": False,
            "device": args.device,
            "torch_num_threads": args.threads,
            "gradient_checkpointing": args.gradient_checkpointing,
            "cache_implementation": args.cache_implementation,
            "seed": 0,
        }
    )
    scorer = None
    if args.rewards == "stand-in":
        scorer = StandInServer(lambda item: stand_in_reward(item["response"])).scorer()
    return train(cfg, scorer=scorer).history[1:]  # the first step warms up kernels and connections


def _summary(steps: list[dict[str, Any]]) -> dict[str, float]:
    med = statistics.median
    return {
        "step_s": med(r["timing/step"] for r in steps),
        "reward_wait_s": med(r["timing/reward_wait"] for r in steps),
        "reward_wait_share": med(r["timing/reward_wait_frac"] for r in steps),
        "tokens_per_s": med(r["perf/tokens_per_s"] for r in steps),
        "generate_s": med(r["timing/generate"] for r in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running reward server; default: start one here")
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode, alternating the modes against drift")
    parser.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="rollout_chunk_prompts; default: --prompts, one generate call a step as TRL makes (trl_step.py's shape). "
        "Overlap hides scoring only with several chunks: pass e.g. --chunk 4 to measure it",
    )
    parser.add_argument("--math-workers", type=int, default=1, help="worker processes of the server started here")
    parser.add_argument("--modes", nargs="+", default=["no-overlap", "overlap"], choices=["no-overlap", "overlap"])
    parser.add_argument("--rewards", default="server", choices=["server", "stand-in"], help="stand-in: no server")
    parser.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument(
        "--cache-implementation",
        default="dynamic",
        choices=["dynamic", "static"],
        help="transformers backend: static decodes over a static KV cache, CUDA graphs on a GPU",
    )
    add_shape_arguments(parser)
    args = parser.parse_args()
    args.chunk = args.chunk or args.prompts

    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        root = Path(tmp)
        data = args.data or root / "prompts.jsonl"
        if args.data is None:
            data.write_text("".join(json.dumps(r) + "\n" for r in _prompts(args.prompts * (args.steps + 1))))
        rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
        model_dir = args.model or root / "model"
        if args.model is None:
            build_model(args, rows, model_dir)
        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())

        server = None
        url = args.url
        if url is None and args.rewards == "server":
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            env = {**os.environ, "RLVR_MATH_WORKERS": str(args.math_workers)}
            server = subprocess.Popen(
                [sys.executable, "-m", "reward_server", "--host", "127.0.0.1", "--port", str(port)],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        try:
            load = os.getloadavg()[0]
            steps: dict[str, list[dict[str, Any]]] = {mode: [] for mode in args.modes}
            for k in range(args.rounds):
                for mode in steps:
                    steps[mode] += _run(mode, args, model_dir, data, url or "http://stand-in", root / f"{mode}-{k}")
            results = {mode: _summary(rows) for mode, rows in steps.items()}
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)

    print(
        f"model: {n_params / 1e6:.1f}M parameters on {args.device} ({args.backend} generation, rewards from "
        f"{args.rewards}); {args.prompts} prompts x {args.generations} "
        f"completions of <= {args.completion_length} tokens per step, chunks of {args.chunk} prompts; "
        f"{args.rounds} x {args.steps} measured steps per mode, alternating; medians; load average at start "
        f"{load:.2f}, at end {os.getloadavg()[0]:.2f}, on {os.cpu_count()} cores"
    )
    print(f"{'mode':<11} {'step s':>8} {'reward wait s':>14} {'wait share':>11} {'tokens/s':>9} {'generate s':>11}")
    for mode, r in results.items():
        print(
            f"{mode:<11} {r['step_s']:8.2f} {r['reward_wait_s']:14.3f} {r['reward_wait_share']:10.1%} "
            f"{r['tokens_per_s']:9.0f} {r['generate_s']:11.2f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"backend": args.backend, "parameters": n_params, "modes": results}))
    if set(results) != {"no-overlap", "overlap"}:
        return
    base, ours = results["no-overlap"], results["overlap"]
    print(
        f"overlap / no-overlap: reward wait x{ours['reward_wait_s'] / base['reward_wait_s']:.2f}, "
        f"step time x{ours['step_s'] / base['step_s']:.2f}, tokens/s x{ours['tokens_per_s'] / base['tokens_per_s']:.2f}"
    )
    hidden = 1 - ours["reward_wait_s"] / base["reward_wait_s"] if base["reward_wait_s"] > 0 else float("nan")
    print(f"scoring time per step (the no-overlap wait): {base['reward_wait_s']:.3f} s; overlap hides {hidden:.0%}")
    goal = "meets" if ours["reward_wait_share"] <= 0.05 else "misses"
    print(f"reward wait share with overlap: {ours['reward_wait_share']:.1%} ({goal} the <= 5% goal)")


if __name__ == "__main__":
    main()
