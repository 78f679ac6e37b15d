"""How much of a tool rollout waits on the tool server, with a chunk's calls batched and one call a request.

A tiny Qwen2 taught (about 1 s) to answer ``Compute a times b.`` with a fenced ``python`` call samples a chunk of
``--prompts`` x ``--generations`` rollouts through the trainer's own ``ToolBackend`` against a reward server started
here (``POST /v1/tools/python``, local sandbox), in two modes that alternate over ``--rounds``:

* ``batched``: the trainer's way, one request per turn with every pending call of the chunk;
* ``one by one``: the same calls, one request each, in turn.

It prints, per mode, the median rollout time, the time waiting on the tool server, and its share of the rollout
(``tools/wait_s`` over the rollout's wall time), then the ratios. The model is tiny, so generation is fast and the
share is an upper bound of what a real model sees; say how loaded the machine was.

    python benchmarks/tool_step_share.py                  # 8 prompts x 8 rollouts, 3 rounds, about a minute
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "clients")]

from _serve import server_process  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from tests.trainer.tools_helpers import TAUGHT, build_tool_model  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.transformers_backend import TransformersBackend  # noqa: E402
from trainer.tools.client import HttpToolClient, ToolRequest, ToolResult  # noqa: E402
from trainer.tools.formats import make_format  # noqa: E402
from trainer.tools.rollout import ToolBackend  # noqa: E402


class OneByOne:
    """The same client, one request per call: what a trainer without chunk batching sends."""

    def __init__(self, inner: HttpToolClient) -> None:
        self.inner = inner

    def run(self, requests: Sequence[ToolRequest]) -> list[ToolResult]:
        return [r for request in requests for r in self.inner.run([request])]

    def close_sessions(self, session_ids: Sequence[str]) -> int:
        return self.inner.close_sessions(session_ids)

    def close(self) -> None:
        self.inner.close()


def rollout(backend: ToolBackend, prompts: list[str], generations: int) -> tuple[float, float, int]:
    """One chunk of rollouts: ``(wall s, tool wait s, calls)``."""
    backend.stats.reset()
    started = time.perf_counter()
    backend.generate(prompts, generations, SamplingParams(max_new_tokens=48, temperature=1.0))
    return time.perf_counter() - started, backend.stats.wait_s, backend.stats.calls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    prompts = [f"Compute {a} times {b}." for a, b in TAUGHT] * (args.prompts // len(TAUGHT) + 1)
    prompts = prompts[: args.prompts]
    with tempfile.TemporaryDirectory(prefix="rlvr-tools-") as tmp:
        model_dir = build_tool_model(Path(tmp) / "model")
        env = {"RLVR_PRELOAD_LANGUAGE_MODELS": "false", "RLVR_SANDBOX_BACKEND": "local"}
        async with server_process(env) as (_, url):
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            inner = TransformersBackend(AutoModelForCausalLM.from_pretrained(model_dir), tokenizer)
            client = HttpToolClient(url)
            modes = {"batched": client, "one by one": OneByOne(client)}
            runs: dict[str, list[tuple[float, float, int]]] = {m: [] for m in modes}
            for c in modes.values():  # warm-up: the sandboxes and the model's first generate
                rollout(
                    ToolBackend(inner, tokenizer, c, make_format("code_block"), max_tool_calling_iterations=2),
                    prompts,
                    args.generations,
                )
            for _ in range(args.rounds):
                for m, c in modes.items():
                    backend = ToolBackend(inner, tokenizer, c, make_format("code_block"), max_tool_calling_iterations=2)
                    runs[m].append(rollout(backend, prompts, args.generations))
            client.close()
    med = statistics.median
    load = os.getloadavg()[0]
    print(
        f"{args.prompts} prompts x {args.generations} rollouts, {args.rounds} rounds (medians), "
        f"{os.cpu_count()} CPUs, load average {load:.2f}"
    )
    print("| mode | rollout s | tool wait s | wait share | calls |")
    print("| --- | --- | --- | --- | --- |")
    summary = {}
    for m, rows in runs.items():
        wall, wait, calls = med(r[0] for r in rows), med(r[1] for r in rows), med(r[2] for r in rows)
        summary[m] = (wall, wait)
        print(f"| {m} | {wall:.2f} | {wait:.2f} | {100 * wait / wall:.0f}% | {calls:.0f} |")
    (bw, bwait), (ow, owait) = summary["batched"], summary["one by one"]
    print(f"one by one / batched: rollout {ow / bw:.2f}x, tool wait {owait / max(bwait, 1e-9):.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
