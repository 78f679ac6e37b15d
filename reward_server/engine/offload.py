"""What the worker pool runs: one item's components that cost CPU in the completion's length.

The pool (:mod:`reward_server.engine.pool`) calls :func:`score_item` in a worker process for each item of a
hand-off, under the item's deadline. The payload is ``(fields, ((name, params), ...))``: the item's
:class:`~reward_server.engine.components.ItemFields` and the components of the table
(:data:`~reward_server.engine.components.REGISTRY`) marked
:attr:`~reward_server.engine.components.Where.WORKER`, in order (math
``accuracy``, ``format``, ``repetition``). The completion crosses the process boundary once, for all of
them. Math goes through :func:`reward_server.verifiers.math.verify_payload`, whose per-worker cache of
parsed references makes a group's reference parse once.
"""

from __future__ import annotations

from typing import Any

from reward_server.engine.components import REGISTRY, ItemFields
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.math import init_worker as init_math_worker

__all__ = ["PRELOAD", "init_worker", "score_item"]

# What the forkserver imports once, so that a new worker serves at full speed at once: the verifier imports
# math-verify on first use, and sympy's simplify imports its units and combinatorics on its first call;
# measured (py-spy), that cost each new worker about a second inside its first requests.
PRELOAD = (
    "reward_server.engine.components",
    "math_verify",
    "latex2sympy2_extended",
    "sympy.physics.units.systems.si",
    "sympy.combinatorics.polyhedron",
)


def init_worker(cache_size: int = 4096) -> None:
    """Per-process set-up: the math verifier's reference cache and warm-up."""
    init_math_worker(cache_size=cache_size)


def score_item(payload: tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]) -> dict[str, tuple[Any, ...]]:
    """Score one item's worker components: ``{name: (score, status, detail, info)}`` in the order given.

    The payload's first element is the :class:`ItemFields` as a tuple, and scores go back as tuples: frozen
    dataclasses with slots pickle through Python code, several microseconds each way.
    """
    fields = ItemFields(*payload[0])
    scores: dict[str, ComponentScore] = {}
    for name, params in payload[1]:
        score = REGISTRY[name].score
        assert score is not None
        scores[name] = score(fields, params, scores)
    return {name: (s.score, s.status, s.detail, s.info) for name, s in scores.items()}
