"""Our GRPO step against TRL's ``GRPOTrainer`` on the same model, batch and lengths: the ratio of step times.

Runs ``benchmarks/trainer_step.py`` (in-process stand-in rewards, the default overlap mode) and
``benchmarks/trl_step.py`` alternately, ``--rounds`` times each, with this interpreter: run it in an environment
that has both the trainer and ``trl`` (``pip install -e ".[train]" trl``), so both sides use the same torch and
transformers. Every other option is passed to both scripts (their shared shape options: ``--prompts``,
``--generations``, ``--completion-length``, ``--beta``, ``--num-iterations``, ``--model``, ``--data``, ...). It prints
each round's step time (one generation batch and its ``num_iterations`` optimizer steps, first batch of each run
left out, median of ``--steps``), the medians over rounds, and TRL / ours (above 1: ours is faster), with the load
average at the start and the end.

Our trainer keeps freed memory for reuse on a CPU (``reuse_freed_memory``, :mod:`trainer.allocator`); TRL runs with
glibc's defaults, as its users get it. ``--trl-reuse-freed-memory`` gives TRL's process the same two glibc settings
(through ``GLIBC_TUNABLES``), to see how much of the ratio that setting is.

    python benchmarks/trl_pair.py                       # random 2.3M Qwen2, 16 prompts x 8 x 48 tokens, beta 0
    python benchmarks/trl_pair.py --model DIR --data prompts.jsonl --prompts 32 --beta 0.2 --num-iterations 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from trainer.allocator import GLIBC_TUNABLES  # noqa: E402

SAME_ALLOCATOR = {"GLIBC_TUNABLES": GLIBC_TUNABLES}  # trainer/allocator.py's two mallopt settings, for TRL's process


def _run(script: str, args: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """One run of ``script`` with ``args`` (and ``env`` added to the environment); its ``--json`` summary
    (``step_s``, ``tokens_per_s``)."""
    extra = ["--rewards", "stand-in", "--modes", "overlap", "--rounds", "1"] if script == "trainer_step.py" else []
    subprocess.run(
        [sys.executable, str(HERE / script), *extra, *args, "--json", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    summary = json.loads(out.read_text())
    return summary["modes"]["overlap"] if "modes" in summary else summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    parser.add_argument(
        "--trl-reuse-freed-memory",
        action="store_true",
        help="run TRL with the glibc malloc settings our trainer makes on a CPU (reuse_freed_memory)",
    )
    args, shape = parser.parse_known_args()
    try:
        import trl
    except ImportError:
        print("trl_pair: TRL is not installed in this environment; pip install trl")
        raise SystemExit(3) from None
    load = os.getloadavg()[0]
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="rlvr-pair-") as tmp:
        for k in range(args.rounds):
            ours.append(_run("trainer_step.py", shape, Path(tmp) / f"ours-{k}.json"))
            trl_env = SAME_ALLOCATOR if args.trl_reuse_freed_memory else None
            theirs.append(_run("trl_step.py", shape, Path(tmp) / f"trl-{k}.json", trl_env))
            print(
                f"round {k + 1}: ours {ours[-1]['step_s']:.2f} s/step, TRL {theirs[-1]['step_s']:.2f} s/step "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    med = statistics.median
    summary = {
        "trl": trl.__version__,
        "shape": shape,
        "ours_step_s": med(r["step_s"] for r in ours),
        "trl_step_s": med(r["step_s"] for r in theirs),
        "ours_tokens_per_s": med(r["tokens_per_s"] for r in ours),
        "trl_tokens_per_s": med(r["tokens_per_s"] for r in theirs),
        "load_start": load,
        "load_end": os.getloadavg()[0],
        "cores": os.cpu_count(),
        "trl_reuse_freed_memory": args.trl_reuse_freed_memory,
    }
    summary["trl_over_ours"] = summary["trl_step_s"] / summary["ours_step_s"]
    print(
        f"medians over {args.rounds} rounds ({' '.join(shape) or 'default shape'}; TRL {trl.__version__}"
        f"{' with our allocator settings' if args.trl_reuse_freed_memory else ''}; load "
        f"{summary['load_start']:.2f} -> {summary['load_end']:.2f} on {summary['cores']} cores): ours "
        f"{summary['ours_step_s']:.2f} s/step ({summary['ours_tokens_per_s']:.0f} tokens/s), TRL "
        f"{summary['trl_step_s']:.2f} s/step ({summary['trl_tokens_per_s']:.0f} tokens/s); TRL / ours "
        f"x{summary['trl_over_ours']:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
