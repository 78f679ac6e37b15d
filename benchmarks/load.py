"""The reward server under load and under hostile clients, measured from outside as a trainer sees it.

Starts ``python -m reward_server`` on 127.0.0.1 (the checkout of ``--repo``, this one by default, so the same
script measures another branch too) and runs one scenario:

* ``closed``: bounded clients (``--clients 1,4,16,64``), each sending a batch (``--batch`` items) as soon as
  its last one came back, for ``--duration`` s per level. Prints items/s, p50/p99 latency, 429s.
* ``overload``: open loop: ``--rate`` requests/s of ``--batch`` items for ``--duration`` s, whatever the server
  answers; ``--rate 0`` first measures capacity with 4 clients and offers ``--factor`` times it. Prints what
  was accepted and refused (429 with their ``Retry-After``), 5xx and connection errors, p50/p99 of accepted
  requests, whether every accepted request came back with one result per id, and the server's peak RSS.
* ``sigterm``: ``--in-flight`` requests sent at once, SIGTERM while they run, and one new request per 0.2 s
  during the drain. Prints how each ended (200 with all ids, 503, 500, reset), the items cancelled, and the
  time to exit.
* ``chunked``: a ``--mb`` MB chunked body (no Content-Length); ``endless``: a chunked body that never ends
  (for ``--duration`` s at most). Print the status, how much was sent before the answer, and the server's
  RSS during and 2 s after.
* ``slowloris``: ``--connections`` connections that send part of their headers, then one byte every 5 s;
  prints how many the server still holds open after 5, 15 and 30 s and how long ``/healthz`` takes meanwhile.

Items are math completions built from MATH-500 (``RLVR_DATA_DIR``, default ``../shared/data``): per problem a
group of 16, half right and half wrong, or synthetic arithmetic where the file is missing. RSS is the main
server process's (``VmRSS``; ``VmHWM`` is its peak), read from ``/proc``. Usage::

    python benchmarks/load.py closed --clients 1,4,16,64
    python benchmarks/load.py overload --rate 0 --factor 3 --batch 256 --duration 30
    python benchmarks/load.py sigterm --in-flight 120
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _serve import REPO, server_process

DATA = Path(os.environ.get("RLVR_DATA_DIR", REPO.parent / "shared" / "data"))


def build_items(n: int, seed: int = 0) -> list[dict]:
    """``n`` math items in groups of 16 completions that share a reference, half right, half wrong."""
    rng = random.Random(seed)
    path = DATA / "math500.jsonl"
    if path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        problems = [(r["solution"].rsplit("\\boxed", 1)[0][:1500], r["answer"]) for r in rows]
    else:
        problems = [(f"Add {a} and {b}.", str(a + b)) for a, b in ((rng.randint(1, 99), rng.randint(1, 99)),) * 500]
    items = []
    for i in range(n):
        reasoning, answer = problems[(i // 16) % len(problems)]
        shown = answer if i % 2 == 0 else f"{answer}+1"
        text = f"<think>\n{reasoning}\n</think>\nThe answer is $\\boxed{{{shown}}}$."
        items.append({"id": str(i), "response": text, "ground_truth": answer})
    return items


def rss_mb(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of ``pid`` in MiB; zeros once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0.0
    values = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return tuple(int(values.get(k, "0 kB").split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


class RssMonitor:
    """Samples a process's RSS every 0.1 s: ``peak_mb`` is the highest sample (and ``VmHWM`` at the end)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_mb = 0.0
        self.start_mb = rss_mb(pid)[0]
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, rss_mb(self.pid)[0])
            await asyncio.sleep(0.1)

    def __enter__(self) -> RssMonitor:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def now_mb(self) -> float:
        return rss_mb(self.pid)[0]


@dataclass
class Tally:
    """What came back: HTTP statuses, latencies of 200s, Retry-After of 429s, ids complete or not."""

    statuses: Counter[str] = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)
    retry_after: list[str] = field(default_factory=list)
    items_ok: int = 0
    incomplete: int = 0
    item_statuses: Counter[str] = field(default_factory=Counter)

    async def post(self, client: httpx.AsyncClient, batch: list[dict]) -> None:
        start = time.perf_counter()
        try:
            r = await client.post("/v1/rewards", json={"items": batch})
        except httpx.TransportError as exc:
            self.statuses[type(exc).__name__] += 1
            return
        self.statuses[str(r.status_code)] += 1
        if r.status_code == 200:
            self.latencies_s.append(time.perf_counter() - start)
            results = r.json()["results"]
            if [x["id"] for x in results] != [it["id"] for it in batch]:
                self.incomplete += 1
            self.items_ok += len(results)
            self.item_statuses.update(x["status"] for x in results)
        elif r.status_code in (429, 503):
            self.retry_after.append(r.headers.get("retry-after", "-"))

    def summary(self, elapsed_s: float) -> str:
        lat = sorted(self.latencies_s)
        p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: float("nan"))
        ra = Counter(self.retry_after)
        return (
            f"{self.items_ok / elapsed_s:8.1f} items/s  p50 {p(0.5):6.2f} s  p99 {p(0.99):6.2f} s  "
            f"answers {dict(sorted(self.statuses.items()))}  Retry-After {dict(ra.most_common(4))}  "
            f"incomplete {self.incomplete}"
        )


def batches(items: list[dict], size: int) -> list[list[dict]]:
    return [items[i : i + size] for i in range(0, len(items) - size + 1, size)]


async def closed_loop(url: str, clients: int, batch: int, duration_s: float, pool: list[list[dict]]) -> Tally:
    tally = Tally()
    deadline = time.perf_counter() + duration_s
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def worker(k: int) -> None:
            n = k
            while time.perf_counter() < deadline:
                await tally.post(client, pool[n % len(pool)])
                n += clients

        await asyncio.gather(*(worker(k) for k in range(clients)))
    return tally


async def open_loop(url: str, rate: float, duration_s: float, pool: list[list[dict]]) -> tuple[Tally, float]:
    """Send ``rate`` requests/s for ``duration_s`` whatever comes back; wait for every answer."""
    tally = Tally()
    limits = httpx.Limits(max_connections=5000, max_keepalive_connections=500)
    timeout = httpx.Timeout(600, connect=60, pool=600)
    tasks: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        start = time.perf_counter()
        i = 0
        while (now := time.perf_counter() - start) < duration_s:
            due = i / rate
            if due > now:
                await asyncio.sleep(due - now)
            tasks.append(asyncio.ensure_future(tally.post(client, pool[i % len(pool)])))
            i += 1
        await asyncio.gather(*tasks)
        return tally, time.perf_counter() - start


def server_env(args: argparse.Namespace) -> dict[str, str]:
    env = {"RLVR_PRELOAD_LANGUAGE_MODELS": "false"}
    for pair in args.env:
        key, _, value = pair.partition("=")
        env[key] = value
    return env


async def run_closed(args: argparse.Namespace) -> None:
    pool = batches(build_items(args.batch * 64), args.batch)
    async with server_process(server_env(args), repo=args.repo) as (proc, url):
        for clients in (int(c) for c in args.clients.split(",")):
            with RssMonitor(proc.pid) as rss:
                tally = await closed_loop(url, clients, args.batch, args.duration, pool)
            print(
                f"{clients:3d} clients x {args.batch} items: {tally.summary(args.duration)}  "
                f"peak RSS {rss.peak_mb:.0f} MiB"
            )


async def run_overload(args: argparse.Namespace) -> None:
    pool = batches(build_items(args.batch * 64), args.batch)
    async with server_process(server_env(args), repo=args.repo) as (proc, url):
        rate = args.rate
        if rate <= 0:
            await closed_loop(url, 4, args.batch, 5.0, pool)  # warm-up: imports and caches in the workers
            probe = await closed_loop(url, 4, args.batch, 15.0, pool)
            capacity = probe.items_ok / 15.0
            rate = args.factor * capacity / args.batch
            print(
                f"capacity {capacity:.0f} items/s (4 clients, 15 s): offering {rate:.2f} requests/s = {args.factor:g}x"
            )
        idle = rss_mb(proc.pid)[0]
        with RssMonitor(proc.pid) as rss:
            tally, elapsed = await open_loop(url, rate, args.duration, pool)
            await asyncio.sleep(2.0)
            after = rss.now_mb()
        offered = int(rate * args.duration)
        print(
            f"offered {offered} requests of {args.batch} items in {args.duration:g} s ({rate:.2f}/s); "
            f"done in {elapsed:.1f} s"
        )
        print(f"  {tally.summary(elapsed)}")
        print(f"  item statuses {dict(tally.item_statuses)}")
        print(f"  server RSS: idle {idle:.0f} MiB, peak {rss.peak_mb:.0f} MiB, 2 s after {after:.0f} MiB")


async def run_sigterm(args: argparse.Namespace) -> None:
    pool = batches(build_items(args.batch * max(args.in_flight, 1)), args.batch)
    async with server_process(server_env(args), repo=args.repo, stop_timeout_s=120) as (proc, url):
        early, late = Tally(), Tally()
        limits = httpx.Limits(max_connections=args.in_flight + 200, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
            tasks = [asyncio.ensure_future(early.post(client, pool[i % len(pool)])) for i in range(args.in_flight)]
            await asyncio.sleep(args.delay)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            late_tasks = []
            while proc.poll() is None and time.perf_counter() - t0 < 120:
                late_tasks.append(asyncio.ensure_future(late.post(client, pool[0])))
                await asyncio.sleep(0.2)
            exit_s = time.perf_counter() - t0
            await asyncio.gather(*tasks, *late_tasks)
        print(
            f"SIGTERM with {args.in_flight} requests of {args.batch} items in flight; "
            f"exit {proc.returncode} after {exit_s:.1f} s"
        )
        print(
            f"  in flight : answers {dict(early.statuses)}, incomplete {early.incomplete}, "
            f"items {dict(early.item_statuses)}"
        )
        print(f"  during drain: answers {dict(late.statuses)}, Retry-After {dict(Counter(late.retry_after))}")


def _item_block(block: int, size: int) -> bytes:
    """About ``size`` bytes of JSON items (each with a unique id), each followed by a comma."""
    text = "x" * 900
    parts, n, total = [], 0, 0
    while total < size:
        part = f'{{"id":"b{block}-{n}","response":"{text}","ground_truth":"1"}},'.encode()
        parts.append(part)
        total += len(part)
        n += 1
    return b"".join(parts)


async def chunked_upload(host: str, port: int, limit_bytes: int | None, duration_s: float) -> dict[str, object]:
    """POST a chunked body of ``limit_bytes`` (or endless) while reading the answer; stop at the answer."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /v1/rewards HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )

    async def read_status() -> tuple[int, float]:
        head = await reader.readuntil(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), time.perf_counter()

    answer = asyncio.ensure_future(read_status())
    start, sent, block = time.perf_counter(), 0, 0
    opening = b'{"items":['
    chunks = [opening]
    ended = "answered"
    while not answer.done():
        if limit_bytes is not None and sent >= limit_bytes:
            last = b'{"id":"end","response":"1","ground_truth":"1"}]}'
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(last), last))
            ended = "sent in full"
            break
        if time.perf_counter() - start > duration_s:
            ended = f"still sending after {duration_s:g} s"
            break
        data = chunks.pop() if chunks else _item_block(block, 1 << 20)
        block += 1
        try:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            drain = asyncio.ensure_future(writer.drain())
            await asyncio.wait({drain, answer}, return_when=asyncio.FIRST_COMPLETED)
            if not drain.done():
                drain.cancel()
        except (ConnectionError, OSError) as exc:
            ended = f"connection closed while sending ({type(exc).__name__})"
            break
        sent += len(data)
    try:
        # A body sent in full may take a while to parse; an unfinished one gets 10 s.
        status, at = await asyncio.wait_for(answer, timeout=300 if ended == "sent in full" else 10)
        result = {"status": status, "answered_after_s": round(at - start, 2)}
    except TimeoutError:
        result = {"status": "no answer 10 s after the upload stopped", "answered_after_s": None}
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        result = {"status": type(exc).__name__, "answered_after_s": None}
    writer.close()
    return {**result, "sent_mb": round(sent / 2**20, 1), "upload": ended}


async def run_body(args: argparse.Namespace, endless: bool) -> None:
    async with server_process(server_env(args), repo=args.repo) as (proc, url):
        host, port = url.removeprefix("http://").split(":")
        idle = rss_mb(proc.pid)[0]
        with RssMonitor(proc.pid) as rss:
            limit = None if endless else int(args.mb * 2**20)
            result = await chunked_upload(host, int(port), limit, args.duration)
            peak = rss.peak_mb
            await asyncio.sleep(2.0)
            after = rss.now_mb()
        async with httpx.AsyncClient(base_url=url) as client:
            health = (await client.get("/healthz")).status_code
        what = "endless chunked body" if endless else f"{args.mb:g} MB chunked body"
        print(f"{what}: {result}")
        print(
            f"  server RSS: idle {idle:.0f} MiB, peak {peak:.0f} MiB, 2 s after the answer {after:.0f} MiB; "
            f"/healthz {health}"
        )


async def run_slowloris(args: argparse.Namespace) -> None:
    async with server_process(server_env(args), repo=args.repo) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        closed_at: list[float] = []
        writers = []
        start = time.perf_counter()

        async def watch(reader: asyncio.StreamReader) -> None:
            try:
                while await reader.read(4096):
                    pass
            except (ConnectionError, OSError):
                pass
            closed_at.append(time.perf_counter() - start)

        watchers = []
        for _ in range(args.connections):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /v1/rewards HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
            writers.append(writer)
            watchers.append(asyncio.ensure_future(watch(reader)))
        print(
            f"{args.connections} connections opened in {time.perf_counter() - start:.1f} s, "
            "each with unfinished headers"
        )
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for mark in (5, 15, 30):
                while time.perf_counter() - start < mark:
                    await asyncio.sleep(min(5.0, mark - (time.perf_counter() - start)))
                    for w in writers:
                        if not w.is_closing():
                            with_suppress_write(w)
                t = time.perf_counter()
                try:
                    code = (await client.get("/healthz")).status_code
                except httpx.TransportError as exc:
                    code = type(exc).__name__
                took = time.perf_counter() - t
                print(
                    f"  after {mark:2d} s: {args.connections - len(closed_at)} still open; "
                    f"/healthz {code} in {took * 1000:.0f} ms"
                )
        for w in writers:
            w.close()
        for task in watchers:
            task.cancel()


def with_suppress_write(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(b"x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", choices=["closed", "overload", "sigterm", "chunked", "endless", "slowloris"])
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose server to start (default: this one)")
    ap.add_argument("--env", action="append", default=[], help="RLVR_X=value for the server (repeatable)")
    ap.add_argument("--batch", type=int, default=256, help="items per request")
    ap.add_argument("--clients", default="1,4,16,64", help="closed: client counts")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds per level / of the open loop / of an upload")
    ap.add_argument("--rate", type=float, default=0.0, help="overload: requests/s (0: --factor x capacity)")
    ap.add_argument("--factor", type=float, default=3.0, help="overload: multiple of the measured capacity")
    ap.add_argument("--in-flight", type=int, default=120, help="sigterm: requests in flight")
    ap.add_argument("--delay", type=float, default=1.5, help="sigterm: seconds between sending and SIGTERM")
    ap.add_argument("--mb", type=float, default=300.0, help="chunked: body size in MB")
    ap.add_argument("--connections", type=int, default=1000, help="slowloris: connections")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; server from {args.repo}")
    if args.scenario == "closed":
        asyncio.run(run_closed(args))
    elif args.scenario == "overload":
        asyncio.run(run_overload(args))
    elif args.scenario == "sigterm":
        asyncio.run(run_sigterm(args))
    elif args.scenario in ("chunked", "endless"):
        asyncio.run(run_body(args, endless=args.scenario == "endless"))
    else:
        asyncio.run(run_slowloris(args))


if __name__ == "__main__":
    main()
