"""Dispatch: each component of a validated batch sent where it runs, all at once, under the batch's budget.

The items' worker components go to the pool (:mod:`reward_server.engine.pool`) in one hand-off per group, the
thread ones to one server thread, the sandbox and model ones to one coroutine per item;
:mod:`reward_server.engine.compose` then weighs each item's scores into its result. :func:`run_math` sends one
math item to the pool (``/v1/math/verify``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from reward_server.engine.components import AccuracyParams, Component, ItemContext, ItemFields, Where
from reward_server.engine.compose import combine
from reward_server.engine.context import ScoringContext
from reward_server.engine.judge import judge_refusals
from reward_server.engine.pool import TaskOutcome, TaskStatus
from reward_server.engine.resolve import ResolvedComponent
from reward_server.schemas.math import MathOptionsModel
from reward_server.schemas.rewards import RewardItem, RewardResult
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.math import MathStatus, MathVerdict

# How many items one hand-off to a worker carries at most, and how much text: a group's completions share a
# reference, so a worker parses it once; a bound keeps one request's piece from holding a worker for long.
_PIECE_ITEMS = 32
_PIECE_CHARS = 400_000


CANCELLED = "cancelled"
"""The status of an item the server stopped scoring (its drain ran out of time at shutdown): reward ``null``."""
_DRAIN_DETAIL = "the server shut down before this was scored (RLVR_DRAIN_S ran out); score it again"


def _budget_detail(budget_s: float) -> str:
    return f"the request's budget of {budget_s:g} s (RLVR_REQUEST_BUDGET_S) ran out before this was scored"


def worker_scores(outcome: TaskOutcome, names: Sequence[str]) -> dict[str, ComponentScore]:
    """Each component's score from a worker's outcome; a timeout or crash applies to all of them."""
    if outcome.status is TaskStatus.OK:
        return {name: ComponentScore(*score) for name, score in outcome.value.items()}
    status = {TaskStatus.TIMEOUT: "timeout", TaskStatus.CANCELLED: CANCELLED}.get(outcome.status, "error")
    return {name: ComponentScore(None, status, outcome.detail) for name in names}


@dataclass
class _WorkerItem:
    index: int
    payload: tuple[tuple[Any, ...], tuple[tuple[str, BaseModel], ...]]
    timeout_s: float
    key: tuple[Any, ...]
    chars: int


def _pieces(work: list[_WorkerItem], num_workers: int) -> list[list[_WorkerItem]]:
    """Hand-offs for the pool: items that share a reference (and options) together, in pieces of at most
    ``_PIECE_ITEMS`` items and ``_PIECE_CHARS`` characters, smaller when there are too few to keep every
    worker busy twice over."""
    groups: dict[tuple[Any, ...], list[_WorkerItem]] = {}
    for w in work:
        groups.setdefault(w.key, []).append(w)
    size = max(1, min(_PIECE_ITEMS, -(-len(work) // (2 * num_workers))))
    pieces: list[list[_WorkerItem]] = []
    for group in groups.values():
        piece: list[_WorkerItem] = []
        chars = 0
        for w in group:
            if piece and (len(piece) >= size or chars + w.chars > _PIECE_CHARS):
                pieces.append(piece)
                piece, chars = [], 0
            piece.append(w)
            chars += w.chars
        pieces.append(piece)
    return pieces


def _in_thread(jobs: list[tuple[int, Component, ItemFields, BaseModel]], out: list[Any], stop: threading.Event) -> None:
    """Run :attr:`Where.THREAD` components in a server thread, one after another, until ``stop`` is set;
    ``out[k]`` receives job ``k``'s score as soon as it is known."""
    for k, (_, component, fields, params) in enumerate(jobs):
        if stop.is_set():
            return
        assert component.score is not None
        try:
            out[k] = component.score(fields, params, {})
        except Exception as exc:  # a bug in one component costs its item, not the batch
            out[k] = ComponentScore(None, "error", f"{type(exc).__name__}: {exc}"[:500])


async def score_components(
    items: list[RewardItem],
    resolved: list[list[ResolvedComponent]],
    ctx: ScoringContext,
    *,
    drain_stop: asyncio.Event | None = None,
    budget_s: float | None = None,
) -> list[RewardResult]:
    """The components of a validated batch; results in item order, exactly one per item.

    Each component runs where :class:`Where` says, all at once: the items' ``WORKER`` components go to the
    pool in one hand-off per group (completions that share a reference), ``THREAD`` ones to one server
    thread, ``ASYNC`` ones (code) to the sandbox; ``INLINE`` ones follow on the loop. The batch is one
    :class:`~reward_server.engine.pool.Flow` of the pool, so other requests get their share meanwhile. What has
    no score when ``ctx.request_budget_s`` runs out is ``timeout``, so a batch never takes much longer
    than its budget. When ``drain_stop`` is set first (the server's drain ran out of time at shutdown), what has no
    score yet is :data:`CANCELLED` instead, and the finished items keep their results.

    ``budget_s`` (default ``ctx.request_budget_s``) is the request's budget as admission scaled it. When it runs
    out while some of the batch's pool items have not even started (slow items held the workers), the wait goes
    on, for every item, up to ``ctx.request_budget_max_s`` from the start: each pool item's own ``timeout_s``
    bounds its run, so the budget does not expire items that never had a worker. A reference whose item timed out
    is remembered as slow (``ctx.slow_references``); an item whose reference was known slow is flagged
    ``info.slow_reference`` on its ``accuracy`` and counted in ``rlvr_slow_reference_items_total``.
    """
    start = time.perf_counter()
    done: list[dict[str, ComponentScore]] = [{} for _ in items]
    fields = [ItemFields.of(item) for item in items]
    to_workers: list[_WorkerItem] = []
    to_thread: list[tuple[int, Component, ItemFields, BaseModel]] = []
    to_sandbox: list[tuple[int, ResolvedComponent]] = []
    to_judge: list[int] = []  # math items whose accuracy asks for the judge (after the rules)
    for i, (item, comps) in enumerate(zip(items, resolved, strict=True)):
        offload: list[tuple[str, BaseModel]] = []
        key: tuple[Any, ...] = (None,)
        timeout_s = ctx.math_timeout_s
        for r in comps:
            where = r.component.where_for(item.task)
            if where is Where.WORKER:
                offload.append((r.component.name, r.params))
                if r.component.name == "accuracy":
                    assert isinstance(r.params, AccuracyParams)
                    key, timeout_s = (item.ground_truth, id(r.params)), ctx.math_item_timeout_s(r.params.math)
                    if r.params.judge and item.task == "math":
                        to_judge.append(i)
            elif where is Where.THREAD:
                to_thread.append((i, r.component, fields[i], r.params))
            elif where is Where.ASYNC:
                to_sandbox.append((i, r))
        if offload:
            payload = (fields[i].as_tuple(), tuple(offload))
            to_workers.append(_WorkerItem(i, payload, timeout_s, key, len(item.response)))

    flow = ctx.math_pool.open_flow()
    stop = threading.Event()
    thread_out: list[ComponentScore | None] = [None] * len(to_thread)

    async def run_piece(piece: list[_WorkerItem]) -> None:
        outcomes = await ctx.math_pool.run(flow, [w.payload for w in piece], [w.timeout_s for w in piece])
        for w, outcome in zip(piece, outcomes, strict=True):
            done[w.index].update(worker_scores(outcome, [name for name, _ in w.payload[1]]))

    async def run_async(i: int, r: ResolvedComponent) -> None:
        assert r.component.run is not None
        done[i][r.component.name] = await r.component.run(ItemContext(items[i], ctx, {}), r.params)

    on_pool = [asyncio.ensure_future(run_piece(p)) for p in _pieces(to_workers, ctx.math_pool.num_workers)]
    elsewhere = [asyncio.ensure_future(run_async(i, r)) for i, r in to_sandbox]
    if to_thread:
        elsewhere.append(asyncio.ensure_future(asyncio.to_thread(_in_thread, to_thread, thread_out, stop)))
    if to_judge and ctx.judge is not None:
        # After the rules: what they refused (or could not read) goes to the judge in one batch, under the budget.
        judge, rules = ctx.judge, list(on_pool)

        async def then_judge() -> None:
            if rules:
                await asyncio.wait(rules)
            await judge_refusals(items, to_judge, done, judge)

        elsewhere.append(asyncio.ensure_future(then_judge()))
    if budget_s is None:
        budget_s = ctx.request_budget_s
    known_slow = [i for i, item in enumerate(items) if item.ground_truth in ctx.slow_references]
    late_status, late_detail = "timeout", _budget_detail(budget_s or 0.0)
    drained = asyncio.ensure_future(drain_stop.wait()) if drain_stop is not None else None
    try:
        if on_pool or elsewhere:
            work = asyncio.ensure_future(asyncio.wait([*on_pool, *elsewhere]))
            waiting = [work, *([drained] if drained is not None else [])]
            await asyncio.wait(waiting, timeout=budget_s, return_when=asyncio.FIRST_COMPLETED)
            hard_s = ctx.request_budget_max_s
            # Items that never started (slow ones held the workers) are not expired at the budget: the wait
            # goes on up to the hard bound. Items already running when it ran out have had their turn.
            starved = not work.done() and ctx.math_pool.flow_waiting(flow) > 0
            if starved and budget_s is not None and hard_s is not None and hard_s > budget_s:
                left_s = hard_s - (time.perf_counter() - start)
                if left_s > 0 and not (drain_stop is not None and drain_stop.is_set()):
                    await asyncio.wait(waiting, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
            work.cancel()
            late = [t for t in (*on_pool, *elsewhere) if not t.done()]
            if late:
                if drain_stop is not None and drain_stop.is_set():
                    late_status, late_detail, pool_status = CANCELLED, _DRAIN_DETAIL, TaskStatus.CANCELLED
                else:
                    assert budget_s is not None
                    pool_status = TaskStatus.TIMEOUT
                # Closing the flow gives the pool's unfinished items their status now; the rest is cancelled.
                ctx.math_pool.close_flow(flow, pool_status, late_detail)
                for task in elsewhere:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
    finally:
        if drained is not None:
            drained.cancel()
        stop.set()
        ctx.math_pool.close_flow(flow)
        for task in (*on_pool, *elsewhere):
            task.cancel()
    for (i, component, _, _), score in zip(to_thread, thread_out, strict=True):
        if score is not None:
            done[i][component.name] = score
    tally: Counter[tuple[str, str]] = Counter()
    results = [
        combine(item, comps, done[i], fields[i], late_status, late_detail, tally)
        for i, (item, comps) in enumerate(zip(items, resolved, strict=True))
    ]
    _note_slow_references(items, results, known_slow, ctx, late_detail)
    if ctx.metrics is not None:
        # One update per (component, status) and per task, not per item: label lookups cost microseconds.
        m = ctx.metrics
        for (name, status), n in tally.items():
            m.verdicts.labels(name, status).inc(n)
            if status == "timeout":
                m.timeouts.labels(name).inc(n)
        for kind, n in Counter(item.task for item in items).items():
            m.items.labels(kind).inc(n)
        paths = Counter(
            r.components["accuracy"].info.get("decided_by", "rule")
            for item, r in zip(items, results, strict=True)
            if item.task == "math" and "accuracy" in r.components and r.components["accuracy"].score is not None
        )
        for path, n in paths.items():
            m.accuracy_paths.labels(path).inc(n)
        latency, elapsed = m.item_latency.labels("item"), time.perf_counter() - start
        for _ in items:
            latency.observe(elapsed)
    return results


def _note_slow_references(
    items: list[RewardItem],
    results: list[RewardResult],
    known_slow: list[int],
    ctx: ScoringContext,
    budget_detail: str,
) -> None:
    """Remember the references whose ``accuracy`` timed out under its own limit (not the request's budget,
    ``budget_detail``); flag the items whose reference was known slow."""
    for item, result in zip(items, results, strict=True):
        accuracy = result.components.get("accuracy")
        own_timeout = accuracy is not None and accuracy.status == "timeout" and accuracy.detail != budget_detail
        if own_timeout and item.ground_truth:
            ctx.slow_references.add(item.ground_truth)
    for i in known_slow:
        accuracy = results[i].components.get("accuracy")
        if accuracy is not None:
            accuracy.info["slow_reference"] = True
    if known_slow and ctx.metrics is not None:
        ctx.metrics.slow_reference_items.inc(len(known_slow))


async def run_math(
    ctx: ScoringContext,
    response: str,
    ground_truth: str,
    options: MathOptionsModel | None = None,
    *,
    truncated: bool = False,
) -> MathVerdict:
    """Verify one math response on the pool, under its deadline; a hang is ``timeout``, a crash ``error``.

    The verdict is counted in ``ctx.metrics`` as one ``math`` item's ``accuracy``.
    """
    item = ItemFields(response, "math", ground_truth=ground_truth, truncated=truncated)
    params = AccuracyParams(math=options)
    payload = (item.as_tuple(), (("accuracy", params),))
    outcome = await ctx.math_pool.submit(payload, timeout_s=ctx.math_item_timeout_s(options))
    s = worker_scores(outcome, ("accuracy",))["accuracy"]
    verdict = MathVerdict(
        MathStatus(s.status),
        s.info.get("correct", False if s.status == MathStatus.NO_ANSWER else None),
        s.info.get("extracted_answer"),
        s.info.get("ground_truth_parsed"),
        s.detail,
    )
    if ctx.metrics is not None:
        ctx.metrics.items.labels("math").inc()
        ctx.metrics.verdicts.labels("accuracy", str(verdict.status)).inc()
        if verdict.status == "timeout":
            ctx.metrics.timeouts.labels("accuracy").inc()
    return verdict
