"""What scoring needs from the running service (:class:`ScoringContext`): pools, limits and metrics.

Built by :func:`reward_server.engine.runtime.scoring_runtime` (for the server's lifespan and the offline
``score`` command) and handed to every scoring call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reward_server.engine.judge import JudgeClient
from reward_server.engine.pool import WorkerPool
from reward_server.engine.reward_models import ModelCatalog, RewardModels
from reward_server.engine.work import SlowReferences
from reward_server.metrics import Metrics
from reward_server.schemas.math import MathOptionsModel
from sandbox import Limits, Sandbox


@dataclass
class ScoringContext:
    """What scoring needs from the running service: pools, limits and metrics.

    Attributes:
        math_pool: the worker pool that runs :func:`reward_server.engine.offload.score_item` (math accuracy and
            the other components marked :attr:`~reward_server.engine.components.Where.WORKER`).
        math_timeout_s: default per-item limit; ``math_max_timeout_s`` caps a request's ``timeout_s``.
        request_budget_s: the most a batch may take; what is not scored by then is ``timeout`` (see
            :func:`~reward_server.engine.batch.score_batch`). ``None``: no budget.
        request_budget_max_s: the most a request's pool items may wait past ``request_budget_s`` while they
            are still being scored (see :func:`~reward_server.engine.dispatch.score_components`).
        slow_references: references whose items timed out before (:mod:`reward_server.engine.work`).
        sandbox: the code sandbox, or ``None`` where code execution is unavailable (``sandbox_unavailable``
            says why).
        code_limits / code_max_limits: a code run's default limits, and the most a request may ask for.
        reward_models: the model workers (``reward_model``, ``prm``), or ``None`` where no model is configured;
            ``models`` says which the server has, and why the others are unavailable.
        judge: the judge model's client (``RLVR_JUDGE_URL``), or ``None`` where no judge is configured.
    """

    math_pool: WorkerPool
    math_timeout_s: float = 5.0
    math_max_timeout_s: float = 30.0
    request_budget_s: float | None = 60.0
    request_budget_max_s: float | None = None
    slow_references: SlowReferences = field(default_factory=SlowReferences)
    metrics: Metrics | None = None
    sandbox: Sandbox | None = None
    sandbox_unavailable: str | None = None
    code_limits: Limits = field(default_factory=Limits)
    code_max_limits: Limits = field(default_factory=Limits)
    reward_models: RewardModels | None = None
    models: ModelCatalog = field(default_factory=ModelCatalog.none)
    judge: JudgeClient | None = None

    def math_item_timeout_s(self, options: MathOptionsModel | None) -> float:
        """One math item's limit: the request's ``timeout_s`` if any, capped by ``math_max_timeout_s``."""
        requested = options.timeout_s if options is not None else None
        return min(requested or self.math_timeout_s, self.math_max_timeout_s)
