"""Prometheus metrics of one app instance.

Each app gets its own :class:`~prometheus_client.CollectorRegistry`, so several apps (tests) never share
counters and nothing is registered at import time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The service's counters and histograms, bound to one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "rlvr_requests_total", "HTTP requests by route and status code", ["route", "code"], registry=r
        )
        self.request_latency = Histogram(
            "rlvr_request_latency_seconds", "HTTP request latency", ["route"], buckets=_LATENCY_BUCKETS_S, registry=r
        )
        self.items = Counter("rlvr_items_total", "Items scored, by task", ["task"], registry=r)
        self.item_latency = Histogram(
            "rlvr_item_latency_seconds",
            "Time to score one item (queueing included), by component",
            ["component"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.verdicts = Counter(
            "rlvr_verdicts_total", "Component verdicts by status", ["component", "status"], registry=r
        )
        self.timeouts = Counter("rlvr_timeouts_total", "Items that hit their time limit", ["component"], registry=r)
        self.worker_restarts = Counter(
            "rlvr_worker_restarts_total",
            "Worker processes replaced, by pool and reason",
            ["pool", "reason"],
            registry=r,
        )
        self.workers_alive = Gauge("rlvr_workers_alive", "Worker processes alive, by pool", ["pool"], registry=r)
        self.queued_items = Gauge(
            "rlvr_queued_items", "Items admitted and not yet answered (bounded by RLVR_MAX_QUEUED_ITEMS)", registry=r
        )
        self.refused = Counter(
            "rlvr_refused_requests_total",
            "Requests refused before scoring: queue_full (429), draining (503), unauthorized (401); drain_cut (503):"
            " ended whole by the drain to finish earlier ones",
            ["reason"],
            registry=r,
        )
        self.queued_work = Gauge(
            "rlvr_queued_work", "Work units admitted and not yet answered (bounded by RLVR_MAX_QUEUED_WORK)", registry=r
        )
        self.slow_reference_items = Counter(
            "rlvr_slow_reference_items_total",
            "Items scored whose reference was known slow (an earlier item with it timed out)",
            registry=r,
        )
        self.connections_closed = Counter(
            "rlvr_connections_closed_total",
            "Connections closed for a slow or oversized client: header_timeout, header_too_large, linger",
            ["reason"],
            registry=r,
        )
        # The judge model (issue 23): which path decided each math accuracy verdict, and the judge's calls.
        self.accuracy_paths = Counter(
            "rlvr_accuracy_decided_total",
            "Math accuracy verdicts by the path that decided them: rule or judge",
            ["path"],
            registry=r,
        )
        self.judge_failures = Counter(
            "rlvr_judge_failures_total",
            "Judge calls that gave no verdict (the item is grader_error): timeout, http_error, connection, "
            "unparseable, over_batch",
            ["reason"],
            registry=r,
        )
        self.judge_latency = Histogram(
            "rlvr_judge_latency_seconds", "Time of one judge call", buckets=_LATENCY_BUCKETS_S, registry=r
        )
        self.tool_sessions = Gauge(
            "rlvr_tool_sessions", "Tool sessions open (bounded by RLVR_TOOL_MAX_SESSIONS)", registry=r
        )

    def watch_sandbox(self, sandbox: object) -> None:
        """Export the sandbox pool's clean-up counts (``cleaned``, ``replaced``) as
        ``rlvr_sandbox_cleanups_total{outcome}``: after a job that hit a limit or left something behind, the
        sandbox was cleaned in place, or replaced because the clean-up could not prove it clean."""
        if hasattr(sandbox, "cleaned") and hasattr(sandbox, "replaced"):
            self.registry.register(_SandboxCleanups(sandbox))

    def watch_pool(self, pool: object) -> None:
        """Export the math pool's slow-lane count as ``rlvr_slow_lane_items_total``."""
        if hasattr(pool, "slow_items"):
            self.registry.register(_SlowLane(pool))


class _SlowLane(Collector):
    """Reads the math pool's count of items moved to the slow lane at each scrape."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "rlvr_slow_lane_items",
            "Math items moved to the slow lane (nice 19, a worker started in their place) after RLVR_MATH_SLOW_ITEM_S"
            " of their own time",
        )
        family.add_metric([], self.pool.slow_items)
        yield family


class _SandboxCleanups(Collector):
    """Reads the counts from the sandbox pool at each scrape."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "rlvr_sandbox_cleanups",
            "Sandboxes after a job that hit a limit or left something behind: cleaned in place, or replaced",
            labels=["outcome"],
        )
        family.add_metric(["cleaned"], self.sandbox.cleaned)
        family.add_metric(["replaced"], self.sandbox.replaced)
        yield family
