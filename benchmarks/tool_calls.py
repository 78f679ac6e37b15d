"""Tool calls per second: the cells a policy writes during its rollouts, run five ways in one run.

* ``bare``: ``python3 -c CODE`` in a subprocess, no isolation at all (the limit);
* ``docker run``: one ``docker run --rm --network none`` of the sandbox image per call (the naive sandbox);
* ``one by one``: ``POST /v1/tools/python`` of a server started here (bubblewrap backend), one call a request;
* ``batched``: the same calls, ``--batch`` a request (what a trainer sends for a chunk's pending calls);
* ``sessions``: ``--batch`` sessions of ``--turns`` turns each, one batched request per turn; each call
  replays its session's earlier turns (the cost of the replay design, docs/tools.md).

Each way runs the same cells (a big multiplication, a sum over a range: what a model cannot do in its head) with
the same concurrency (``--concurrency``, default: the number of cores; the server gets that many sandboxes), and
every call's output is checked. Ratios are of one run: ``--rounds`` rounds, each way's best kept.

Usage: ``python benchmarks/tool_calls.py [--calls 192] [--batch 32] [--turns 4] [--skip docker-run]``.
Needs ``bwrap``, and for ``docker run`` a Docker engine and the image from ``docker/build_sandbox.sh``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx
from _serve import local_server
from code_throughput import IMAGE, PYTHON, run_threads


def cells(n: int) -> list[tuple[str, str]]:
    """``n`` cells and the stdout each must print."""
    out = []
    for i in range(n):
        a, b = 123_456_789 + i, 987_654_321 - i
        if i % 2:
            out.append((f"print({a} * {b})", f"{a * b}\n"))
        else:
            out.append((f"print(sum(k * k for k in range({1000 + i})))", f"{sum(k * k for k in range(1000 + i))}\n"))
    return out


def bare(work: list[tuple[str, str]], concurrency: int) -> tuple[float, int]:
    def job(code: str, want: str) -> Callable[[], bool]:
        def run() -> bool:
            done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, check=False)
            return done.stdout == want

        return run

    return run_threads([job(c, w) for c, w in work], concurrency)


def docker_run(work: list[tuple[str, str]], concurrency: int) -> tuple[float, int]:
    def job(code: str, want: str) -> Callable[[], bool]:
        def run() -> bool:
            argv = ["docker", "run", "--rm", "--network", "none", "--memory", "512m", IMAGE, "python3", "-c", code]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            return done.stdout == want

        return run

    return run_threads([job(c, w) for c, w in work], concurrency)


async def post(client: httpx.AsyncClient, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = await client.post("/v1/tools/python", json={"calls": calls})
    r.raise_for_status()
    results: list[dict[str, Any]] = r.json()["results"]
    return results


async def endpoint(
    client: httpx.AsyncClient, work: list[tuple[str, str]], batch: int, concurrency: int
) -> tuple[float, int]:
    """Every cell through the endpoint, ``batch`` calls a request, ``4 * concurrency`` requests in flight."""
    sem = asyncio.Semaphore(4 * concurrency)

    async def send(part: list[tuple[str, str]]) -> int:
        async with sem:
            results = await post(client, [{"code": code} for code, _ in part])
        return sum(r["status"] == "ok" and r["stdout"] == want for r, (_, want) in zip(results, part, strict=True))

    start = time.perf_counter()
    parts = [work[i : i + batch] for i in range(0, len(work), batch)]
    passed = sum(await asyncio.gather(*(send(p) for p in parts)))
    return time.perf_counter() - start, passed


async def sessions(client: httpx.AsyncClient, work: list[tuple[str, str]], batch: int, turns: int) -> tuple[float, int]:
    """``batch`` sessions at once, ``turns`` turns each (one request per turn), until every cell has run; each
    turn also prints a variable its session set in its first turn."""
    passed = 0
    start = time.perf_counter()
    for first in range(0, len(work), batch * turns):
        group = work[first : first + batch * turns]
        ids: list[str] = [f"bench-{first}-{s}" for s in range(min(batch, len(group)))]
        for turn in range(turns):
            part = group[turn * len(ids) : (turn + 1) * len(ids)]
            calls = [
                {"code": f"v = {s}\n{code}" if turn == 0 else f"{code}\nprint(v)", "session_id": ids[s]}
                for s, (code, _) in enumerate(part)
            ]
            results = await post(client, calls)
            for s, (r, (_, want)) in enumerate(zip(results, part, strict=True)):
                ids[s] = r["session_id"]
                passed += r["status"] == "ok" and r["stdout"] == (want if turn == 0 else f"{want}{s}\n")
        for sid in ids:
            await client.delete(f"/v1/tools/sessions/{sid}")
    return time.perf_counter() - start, passed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=192, help="cells per way")
    ap.add_argument("--batch", type=int, default=32, help="calls per request (batched), sessions at once (sessions)")
    ap.add_argument("--turns", type=int, default=4, help="turns per session (sessions)")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 1, help="calls at once, every way")
    ap.add_argument("--rounds", type=int, default=2, help="measure each way this many times; keep its best")
    ap.add_argument("--skip", default="", help="comma-separated ways to skip: bare, docker-run, one-by-one, ...")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    work = cells(args.calls)
    env = {
        "RLVR_SANDBOX_POOL_SIZE": str(args.concurrency),
        "RLVR_MATH_WORKERS": "1",
        "RLVR_TOOL_MAX_SESSIONS": "100000",
    }

    async def served() -> dict[str, tuple[float, int]]:
        async with local_server(env) as client:
            await endpoint(client, work[:4], 1, 1)  # warm the pool
            out = {}
            if "one-by-one" not in skip:
                out["one-by-one"] = await endpoint(client, work, 1, args.concurrency)
            if "batched" not in skip:
                out["batched"] = await endpoint(client, work, args.batch, args.concurrency)
            if "sessions" not in skip:
                out["sessions"] = await sessions(client, work, args.batch, args.turns)
            return out

    print(
        f"{len(work)} tool calls a way; concurrency {args.concurrency}, {os.cpu_count()} cores, batch {args.batch}, "
        f"{args.turns} turns a session, best of {args.rounds} rounds; load average {os.getloadavg()[0]:.2f}"
    )
    best: dict[str, float] = {}
    for round_ in range(args.rounds):
        runs: dict[str, tuple[float, int]] = {}
        if "bare" not in skip:
            runs["bare"] = bare(work, args.concurrency)
        if "docker-run" not in skip:
            runs["docker-run"] = docker_run(work, args.concurrency)
        runs.update(asyncio.run(served()))
        for name, (seconds, passed) in runs.items():
            if passed != len(work):
                raise SystemExit(f"{name}: only {passed}/{len(work)} calls gave the right output")
            print(f"  round {round_ + 1} {name:<11} {len(work) / seconds:7.1f} calls/s ({seconds:.2f} s)")
            best[name] = min(seconds, best.get(name, float("inf")))

    rate = {name: len(work) / s for name, s in best.items()}
    labels = {
        "bare": "bare python -c (no isolation)",
        "docker-run": "docker run per call",
        "one-by-one": "endpoint, one call a request",
        "batched": f"endpoint, {args.batch} calls a request",
        "sessions": f"endpoint, sessions of {args.turns} turns",
    }
    print(f"\n{'way':<36}{'calls/s':>8}{'vs bare':>9}{'vs docker run':>15}")
    for name, label in labels.items():
        if name in rate:
            vs_bare = f"{rate[name] / rate['bare']:.2f}x" if "bare" in rate else "-"
            vs_run = f"{rate[name] / rate['docker-run']:.1f}x" if "docker-run" in rate else "-"
            print(f"{label:<36}{rate[name]:8.1f}{vs_bare:>9}{vs_run:>15}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
