"""The event loop under a batch of long completions: /healthz latency, false timeouts and worker restarts.

Starts ``python -m reward_server`` with its defaults (language models not preloaded), then sends one batch
of ``--items`` completions of ``--chars`` characters each (R1-Zero preset: accuracy + format) while a
second client sends 40 batches of 64 short math items, and a separate process polls ``GET /healthz``
every 0.1 s. Prints the batch's time, the statuses of both clients' items, the /healthz round trips (max
and p99) and the server's timeout and restart counters. Before issue 14 the format scoring ran on the event
loop: this run gave a /healthz stall of 48.9 s, two false ``timeout`` verdicts and two killed workers.

Usage: ``python benchmarks/long_batch.py [--items 1024] [--chars 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

from _serve import local_server

REASONING = (
    "Let the two numbers be $a$ and $b$. From the first equation, $a + b = 12$, and from the second, "
    "$a - b = 4$. Adding them gives $2a = 16$, so $a = 8$.\n"
)
POLLER = """
import sys, time, httpx
with httpx.Client() as c:
    while True:
        t = time.monotonic()
        c.get(sys.argv[1] + "/healthz", timeout=120)
        print(time.monotonic() - t, flush=True)
        time.sleep(0.1)
"""


def long_completion(chars: int) -> str:
    body = (REASONING * (chars // len(REASONING) + 1))[:chars]
    return f"<think>\n{body}\n</think>\nSo the answer is $\\boxed{{8}}$."


async def run(items: int, chars: int) -> None:
    async with local_server({"RLVR_PRELOAD_LANGUAGE_MODELS": "false"}, ready_timeout_s=300) as client:
        text = long_completion(chars)
        body = json.dumps(
            {
                "items": [{"id": f"l{i}", "response": text, "ground_truth": "8"} for i in range(items)],
                "preset": "r1_zero",
            }
        )
        short = [{"id": f"m{j}", "response": "\\boxed{32}", "ground_truth": "32"} for j in range(64)]
        with tempfile.TemporaryFile("w+") as out:
            poller = subprocess.Popen([sys.executable, "-c", POLLER, str(client.base_url).rstrip("/")], stdout=out)
            try:
                start = time.monotonic()
                batch = asyncio.ensure_future(
                    client.post("/v1/rewards", content=body, headers={"content-type": "application/json"})
                )
                statuses: Counter[str] = Counter()
                for _ in range(40):
                    r = await client.post("/v1/rewards", json={"items": short})
                    statuses.update(x["status"] for x in r.json()["results"])
                results = (await batch).json()["results"]
                elapsed = time.monotonic() - start
            finally:
                poller.kill()
                poller.wait()
            out.seek(0)
            waits = sorted(float(x) for x in out.read().split())
        metrics = (await client.get("/metrics")).text
    long_statuses = Counter(
        (x["components"]["accuracy"]["status"], x["components"]["format"]["status"]) for x in results
    )
    print(f"{items} completions of {chars:,} characters ({len(body) / 1e6:.0f} MB), {os.cpu_count()} cores")
    print(f"long batch: {elapsed:.1f} s; (accuracy, format) statuses: {dict(long_statuses)}")
    print(f"other client: {dict(statuses)}")
    if waits:
        print(f"/healthz: {len(waits)} round trips, max {max(waits):.3f} s, p99 {waits[int(0.99 * len(waits))]:.3f} s")
    counters = [
        line
        for line in metrics.splitlines()
        if line.startswith(("rlvr_worker_restarts_total{", 'rlvr_timeouts_total{component="accuracy"}'))
    ]
    print(f"timeouts and restarts: {counters or 'none'}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--chars", type=int, default=100_000)
    args = ap.parse_args()
    asyncio.run(run(args.items, args.chars))


if __name__ == "__main__":
    main()
