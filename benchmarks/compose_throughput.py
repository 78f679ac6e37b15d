"""The reward server in its compose container against the same server on the host, in one run.

* ``host``: ``python -m reward_server`` started here with the ``local`` (bubblewrap) backend: the baseline;
* ``compose``: ``docker compose up`` of docker-compose.yml, the same backend inside the server's container
  (seccomp profile, no capabilities, read-only root).

Each way scores HumanEval's 164 canonical solutions with their tests (``POST /v1/code/test``; every one
must pass) ``--rounds`` times and keeps its best round, then MBPP's 974 reference solutions once (a wider
check that the container's seccomp profile refuses nothing real programs use). Both ways get the same
warm sandboxes (``--concurrency``, default: the number of cores).

Usage: ``python benchmarks/compose_throughput.py [--concurrency N] [--rounds 2]``. Needs bubblewrap, a
Docker engine, the images (``docker/build_images.sh``) and ``docker compose``. Data from ``RLVR_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from _serve import REPO, free_port, local_server
from code_throughput import DATA, humaneval_bodies, load_problems, post_tests


def mbpp_bodies() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (DATA / "mbpp.jsonl").read_text().splitlines() if line.strip()]
    return [
        {
            "language": "python",
            "code": r["code"],
            "tests": {"type": "assert", "test_list": r["test_list"], "setup_code": r["test_setup_code"]},
        }
        for r in rows
    ]


@asynccontextmanager
async def compose_server(env: dict[str, str], ready_timeout_s: float = 120.0) -> AsyncIterator[httpx.AsyncClient]:
    """``docker compose up`` the repo's docker-compose.yml on a free port; ``down`` on the way out."""
    port = free_port()
    project = f"rlvr-bench-{secrets.token_hex(4)}"
    full_env = {**os.environ, **env, "RLVR_HOST": "127.0.0.1", "RLVR_PORT": str(port)}
    compose = ["docker", "compose", "-p", project, "-f", str(REPO / "docker-compose.yml")]
    try:
        started = time.perf_counter()
        up = subprocess.run(
            [*compose, "up", "-d", "--wait"], env=full_env, capture_output=True, text=True, timeout=ready_timeout_s
        )
        if up.returncode != 0:
            raise RuntimeError(f"docker compose up failed: {up.stderr}")
        print(f"  compose: healthy {time.perf_counter() - started:.1f} s after up")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            yield client
    finally:
        subprocess.run([*compose, "down", "--timeout", "20"], env=full_env, capture_output=True, timeout=120)


async def measure(way: str, concurrency: int, rounds: int) -> tuple[float, int, int]:
    """(best HumanEval seconds, HumanEval passed, MBPP passed) for one way."""
    env = {
        "RLVR_SANDBOX_BACKEND": "local",
        "RLVR_SANDBOX_POOL_SIZE": str(concurrency),
        "RLVR_MATH_WORKERS": "1",
        "RLVR_PRELOAD_LANGUAGE_MODELS": "false",
    }
    server = local_server(env) if way == "host" else compose_server(env)
    humaneval, mbpp = humaneval_bodies(load_problems()), mbpp_bodies()
    async with server as client:
        best, passed = float("inf"), 0
        for round_ in range(rounds):
            seconds, passed = await post_tests(client, humaneval, concurrency)
            print(f"  round {round_ + 1} {way:<8} {len(humaneval) / seconds:7.1f} jobs/s ({seconds:.2f} s)")
            best = min(best, seconds)
        _, mbpp_passed = await post_tests(client, mbpp, concurrency)
    return best, passed, mbpp_passed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 1, help="warm sandboxes, both ways")
    ap.add_argument("--rounds", type=int, default=2, help="HumanEval rounds per way; the best is kept")
    args = ap.parse_args()
    n_humaneval, n_mbpp = len(load_problems()), len(mbpp_bodies())
    print(f"concurrency {args.concurrency}, {os.cpu_count()} cores, best of {args.rounds} rounds")
    results = {way: asyncio.run(measure(way, args.concurrency, args.rounds)) for way in ("host", "compose")}

    print(f"\n{'way':<44}{'jobs/s':>8}{'vs host':>9}{'HumanEval':>11}{'MBPP':>10}")
    labels = {"host": "server on the host, local backend", "compose": "server in its compose container"}
    for way, (seconds, passed, mbpp_passed) in results.items():
        rate = n_humaneval / seconds
        ratio = results["host"][0] / seconds
        print(
            f"{labels[way]:<44}{rate:8.1f}{ratio:8.2f}x{f'{passed}/{n_humaneval}':>11}{f'{mbpp_passed}/{n_mbpp}':>10}"
        )
    if any(p != n_humaneval or m != n_mbpp for _, p, m in results.values()):
        raise SystemExit("some reference solutions did not pass")


if __name__ == "__main__":
    main()
