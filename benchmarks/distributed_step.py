"""One GRPO step on 2 gloo ranks against 1 process, on CPU: the same global batch, printed as a ratio.

The one-process run trains here; the two-rank run is this script again under ``torchrun --standalone
--nproc_per_node 2`` (each rank takes half the prompts). Both use one torch thread per process, the random tiny
Qwen2 of ``trainer_step.py`` and an in-process stand-in reward rule (no server), so the figure is the trainer's
own: generation and update split over two processes, against what the collectives (gathering rewards, all-reducing
gradients, reducing metrics) cost. The first step of each run is a warm-up; medians of the rest are printed. Two
ranks on a two-core machine shared with other work show the overhead more than the speed-up: say how loaded it was.

    python benchmarks/distributed_step.py                   # a few minutes on 2 loaded cores
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from trainer_step import _prompts, add_shape_arguments, build_model, stand_in_reward  # noqa: E402

from trainer.config import config_from_dict  # noqa: E402
from trainer.stand_in import StandInServer  # noqa: E402
from trainer.train import train  # noqa: E402


def _train(args: argparse.Namespace, model_dir: Path, data: Path, out: Path) -> list[dict[str, Any]]:
    cfg = config_from_dict(
        {
            "model_name_or_path": str(model_dir),
            "train_data": str(data),
            "output_dir": str(out),
            "max_steps": args.steps + 1,
            "prompt_batch_size": args.prompts,
            "num_generations": args.generations,
            "max_completion_length": args.completion_length,
            "learning_rate": 1e-5,
            "report_to_tensorboard": False,
            "progress_bar": False,
            "device": "cpu",
            "torch_num_threads": args.threads,
            "seed": 0,
        }
    )
    return train(cfg, scorer=StandInServer(lambda item: stand_in_reward(item["response"])).scorer()).history[1:]


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "step_s": statistics.median(r["timing/step"] for r in rows),
        "tokens_per_s": statistics.median(r["perf/tokens_per_s"] for r in rows),
        "generate_s": statistics.median(r["timing/generate"] for r in rows),
        "update_s": statistics.median(r["timing/update"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=3, metavar=("MODEL", "DATA", "OUT"), help=argparse.SUPPRESS)
    add_shape_arguments(parser)
    args = parser.parse_args()
    if args.worker:  # one rank of the two-rank run, under torchrun
        model_dir, data, out = (Path(a) for a in args.worker)
        rows = _train(args, model_dir, data, out)
        if int(os.environ.get("RANK", "0")) == 0:
            (out / "history.json").write_text(json.dumps(rows))
        return

    with tempfile.TemporaryDirectory(prefix="rlvr-dist-") as tmp:
        root = Path(tmp)
        rows = _prompts(args.prompts * (args.steps + 1))
        data = root / "prompts.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        model_dir = root / "model"
        build_model(args, rows, model_dir)
        load_start = os.getloadavg()[0]
        one = _summary(_train(args, model_dir, data, root / "one"))
        # what _train reads (the model is built here, once)
        shape = [f"--{k}={getattr(args, k)}" for k in ("steps", "prompts", "generations", "threads")]
        shape += [f"--completion-length={args.completion_length}"]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__]
        worker = ["--worker", str(model_dir), str(data), str(root / "two"), *shape]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "clients"))),
            "OMP_NUM_THREADS": str(args.threads),
        }
        proc = subprocess.run([*cmd, *worker], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"the two-rank run failed:\n{proc.stderr[-4000:]}")
        two = _summary(json.loads((root / "two" / "history.json").read_text()))
    print(
        f"{args.prompts} prompts x {args.generations} completions of <= {args.completion_length} tokens per step, "
        f"{args.threads} torch thread(s) per process, {args.steps} measured steps, medians; load average "
        f"{load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end, on {os.cpu_count()} cores"
    )
    print(f"{'run':<16} {'step s':>8} {'generate s':>11} {'update s':>9} {'tokens/s':>9}")
    for name, r in (("1 process", one), ("2 gloo ranks", two)):
        print(f"{name:<16} {r['step_s']:8.2f} {r['generate_s']:11.2f} {r['update_s']:9.2f} {r['tokens_per_s']:9.0f}")
    print(
        f"2 ranks / 1 process: step time x{two['step_s'] / one['step_s']:.2f}, "
        f"tokens/s x{two['tokens_per_s'] / one['tokens_per_s']:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"one": one, "two": two}))


if __name__ == "__main__":
    main()
