"""Prometheus metrics of one app instance.

Each app gets its own :class:`~prometheus_client.CollectorRegistry`, so several apps (tests) never share
counters and nothing is registered at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
            live: Any = sandbox
            self.registry.register(
                _ReadCounter(
                    "rlvr_sandbox_cleanups",
                    "Sandboxes after a job that hit a limit or left something behind: cleaned in place, or replaced",
                    ["outcome"],
                    lambda: [(["cleaned"], live.cleaned), (["replaced"], live.replaced)],
                )
            )

    def watch_pool(self, pool: object) -> None:
        """Export the math pool's slow-lane count as ``rlvr_slow_lane_items_total``."""
        if hasattr(pool, "slow_items"):
            live: Any = pool
            self.registry.register(
                _ReadCounter(
                    "rlvr_slow_lane_items",
                    "Math items moved to the slow lane (nice 19, a worker started in their place) after "
                    "RLVR_MATH_SLOW_ITEM_S of their own time",
                    [],
                    lambda: [([], live.slow_items)],
                )
            )


class _ReadCounter(Collector):
    """A counter whose values are read from their owner at each scrape: ``read()`` gives ``(labels, value)``
    pairs."""

    def __init__(
        self, name: str, documentation: str, labels: list[str], read: Callable[[], list[tuple[list[str], float]]]
    ) -> None:
        self.name, self.documentation, self.labels, self.read = name, documentation, labels, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for labels, value in self.read():
            family.add_metric(labels, value)
        yield family
