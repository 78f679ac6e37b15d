"""The reward models of the server: which are configured, their worker processes, and dynamic batching.

Each configured model (``RLVR_REWARD_MODEL_PATH``: the ``reward_model`` component; ``RLVR_PRM_PATH``: the ``prm``
step component) is loaded in ``RLVR_REWARD_MODEL_WORKERS`` worker processes of a
:class:`~reward_server.engine.pool.WorkerPool` (torch never runs in the server process, let alone on its event loop).
Items reach a worker through :class:`RewardModels`, a dynamic batcher: what arrives while every worker is busy
waits, and a worker that frees up takes the oldest item with up to ``RLVR_REWARD_MODEL_BATCH_SIZE`` more of its
kind, from every request at once, in one hand-off. An idle worker waits ``RLVR_REWARD_MODEL_BATCH_WAIT_S`` for a
batch to fill. A hand-off that takes longer than ``RLVR_REWARD_MODEL_TIMEOUT_S`` ends ``timeout`` for its items and
its worker is replaced; a worker that dies ends its items ``error``, and is replaced too.

What is configured is known from the settings alone (:class:`ModelCatalog`): a request that asks for a model the
server does not have is a 422 that says what to set, before any work starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from reward_server.engine.pool import TaskStatus, WorkerPool
from reward_server.settings import Settings

__all__ = ["ModelCatalog", "ModelError", "ModelInfo", "ModelOutcome", "RewardModels"]

logger = logging.getLogger("reward_server")

HANDLER = "reward_server.verifiers.reward_model:score_payload"

Kind = Literal["sequence", "token"]

# component -> (kind, settings field, the Auto class its checkpoint must be saved as)
_MODELS: dict[str, tuple[Kind, str, str]] = {
    "reward_model": ("sequence", "reward_model_path", "AutoModelForSequenceClassification"),
    "prm": ("token", "prm_path", "AutoModelForTokenClassification"),
}
_INSTALL = "torch and transformers, from the train extra: pip install 'rlvr[train]'"


class ModelError(RuntimeError):
    """A configured model cannot be used (no such directory, the wrong kind of checkpoint, torch missing)."""


@dataclass(frozen=True)
class ModelInfo:
    """What the server knows of a configured model from its ``config.json`` (read without torch).

    Attributes:
        component: ``reward_model`` or ``prm``.
        kind: ``sequence`` (a sequence classifier) or ``token`` (a token classifier).
        path: the checkpoint directory.
        architecture: the class it was saved as (``Qwen2ForSequenceClassification`` ...).
        num_labels: the classifier's outputs.
        mean, std: the normalisation a trainer stored in the config (OpenRLHF's ``--normalize_reward``
            writes them), used by ``normalize: standardize`` when a request gives none.
        label: the PRM's label whose probability scores a step (``RLVR_PRM_LABEL``; default 1 with two labels
            or more, 0 with one).
    """

    component: str
    kind: Kind
    path: str
    architecture: str
    num_labels: int
    mean: float | None = None
    std: float | None = None
    label: int = 0

    @classmethod
    def read(cls, component: str, path: str, *, trust_remote_code: bool = False) -> ModelInfo:
        """Read and check ``path/config.json`` for ``component``.

        Raises:
            ModelError: no such directory or config, or a checkpoint that is not of the component's kind.
        """
        kind, setting, auto = _MODELS[component]
        env = f"RLVR_{setting.upper()}"
        config_path = Path(path) / "config.json"
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelError(f"{env}={path}: no {config_path} (give a directory saved with save_pretrained)") from None
        except (OSError, ValueError) as exc:
            raise ModelError(f"{env}={path}: cannot read {config_path}: {exc}") from exc
        architectures = config.get("architectures") or []
        suffix = auto.removeprefix("AutoModel")  # ForSequenceClassification / ForTokenClassification
        matching = [a for a in architectures if a.endswith(suffix)]
        remote = trust_remote_code and auto in (config.get("auto_map") or {})
        if not matching and not remote:
            raise ModelError(
                f"{env}={path}: a {component} must be saved as {auto} (an architecture ending in {suffix}), "
                f"but its config says {architectures or 'nothing'}; a checkpoint of another kind would load with a "
                "random head"
            )
        labels = config.get("id2label")
        num_labels = len(labels) if isinstance(labels, dict) and labels else int(config.get("num_labels", 2))
        mean, std = config.get("mean"), config.get("std")
        return cls(
            component,
            kind,
            path,
            (matching or architectures or [auto])[0],
            num_labels,
            float(mean) if isinstance(mean, int | float) else None,
            float(std) if isinstance(std, int | float) and std > 0 else None,
        )


@dataclass(frozen=True)
class ModelCatalog:
    """The models this server has (``infos``) and why the others are unavailable (``unavailable``), by component."""

    infos: dict[str, ModelInfo] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelCatalog:
        """Check the configured models (their ``config.json`` and that torch is installed, nothing loaded).

        Raises:
            ModelError: a configured model cannot be used; the message names the variable and the fix.
        """
        infos: dict[str, ModelInfo] = {}
        unavailable: dict[str, str] = {}
        for component, (_, setting, auto) in _MODELS.items():
            path = getattr(settings, setting)
            env = f"RLVR_{setting.upper()}"
            if path is None:
                unavailable[component] = (
                    f"this server has no {component.replace('_', ' ')}: start it with {env}=<a directory saved "
                    f"from an {auto}> (needs {_INSTALL})"
                )
                continue
            missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
            if missing:
                verb = "is" if len(missing) == 1 else "are"
                raise ModelError(f"{env} is set but {' and '.join(missing)} {verb} not installed: install {_INSTALL}")
            info = ModelInfo.read(component, path, trust_remote_code=settings.reward_model_trust_remote_code)
            if component == "prm":
                label = settings.prm_label if settings.prm_label is not None else int(info.num_labels >= 2)
                if label >= info.num_labels:
                    raise ModelError(f"RLVR_PRM_LABEL={label}, but {path} has {info.num_labels} label(s)")
                info = replace(info, label=label)
            infos[component] = info
        return cls(infos, unavailable)

    @classmethod
    def none(cls) -> ModelCatalog:
        """A catalog with no model (every model component unavailable), from default settings."""
        return cls(unavailable=cls.from_settings(Settings.model_construct()).unavailable)

    def reason(self, component: str) -> str | None:
        """Why ``component`` is unavailable here, or ``None`` when the server has it."""
        if component in self.infos:
            return None
        return self.unavailable.get(component, f"{component} is not a model component")


@dataclass(frozen=True, slots=True)
class ModelOutcome:
    """One item's result from a model worker.

    Attributes:
        status: ``ok``, ``timeout`` (its hand-off ran past ``RLVR_REWARD_MODEL_TIMEOUT_S``) or ``error`` (the
            worker died, or this item could not be encoded or run; ``detail`` says which).
        value: with ``ok``: the ``(num_labels,)`` logits (a sequence model), or per step the logits at its mark,
            ``None`` where truncation cut the step off (a token model).
        truncated_tokens: tokens dropped to fit the model's length limit.
    """

    status: str
    value: Any = None
    detail: str | None = None
    truncated_tokens: int = 0


@dataclass(eq=False)
class _Waiting:
    kind: Kind
    item: tuple[Any, ...]
    future: asyncio.Future[ModelOutcome]
    since: float


class RewardModels:
    """The model worker pool behind a dynamic batcher (see the module docstring).

    Build it with :meth:`start`; every method is called from the server's event loop.
    """

    def __init__(
        self,
        pool: WorkerPool,
        catalog: ModelCatalog,
        *,
        batch_size: int = 16,
        batch_wait_s: float = 0.005,
        timeout_s: float = 60.0,
    ) -> None:
        self.pool = pool
        self.catalog = catalog
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_s
        self.timeout_s = timeout_s
        self._queue: deque[_Waiting] = deque()
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._hand_offs: set[asyncio.Task[None]] = set()
        self._closed = False
        self.batches = 0  # hand-offs made, for tests and logs
        self.batched_items = 0

    @classmethod
    async def start(
        cls, settings: Settings, catalog: ModelCatalog, on_restart: Callable[[str], None] | None = None
    ) -> RewardModels | None:
        """Start the workers of the configured models and wait until each has loaded them; ``None`` when no model
        is configured.

        Raises:
            TimeoutError: loading took longer than ``settings.model_start_timeout_s``.
            RuntimeError: a worker could not load the models (the server's log holds the worker's traceback).
        """
        if not catalog.infos:
            return None
        kinds = {info.kind: info.path for info in catalog.infos.values()}
        pool = WorkerPool(
            HANDLER,
            settings.reward_model_workers,
            name="reward_model",
            init_kwargs={
                "models": kinds,
                "device": settings.reward_model_device,
                "dtype": settings.reward_model_dtype,
                "threads": settings.reward_model_threads,
                "max_length": settings.reward_model_max_length,
                "max_batch_tokens": settings.reward_model_max_batch_tokens,
                "chat_template": settings.reward_model_chat_template,
                "step_tag": settings.prm_step_tag,
                "trust_remote_code": settings.reward_model_trust_remote_code,
            },
            on_restart=on_restart,
            # A hand-off's deadline is wall time on its worker: a forward pass runs on many threads (or waits on
            # a GPU), so its CPU time says little. A worker is never doubled for a slow hand-off either: each
            # one holds a copy of the models.
            grace_s=0.0,
            slow_item_s=None,
            max_extra_workers=0,
            soft_clock="wall",
        )
        started = time.perf_counter()
        await pool.start(timeout_s=settings.model_start_timeout_s)
        logger.info(
            "reward models ready in %.1f s on %s: %s",
            time.perf_counter() - started,
            settings.reward_model_device,
            ", ".join(f"{c} {i.path} ({i.architecture})" for c, i in catalog.infos.items()),
        )
        return cls(
            pool,
            catalog,
            batch_size=settings.reward_model_batch_size,
            batch_wait_s=settings.reward_model_batch_wait_s,
            timeout_s=settings.reward_model_timeout_s,
        )

    @property
    def ready(self) -> bool:
        return not self._closed and self.pool.ready

    async def close(self) -> None:
        """Stop the workers; what is still queued ends ``error``."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        while self._queue:
            w = self._queue.popleft()
            if not w.future.done():
                w.future.set_result(ModelOutcome("error", detail="the server is shutting down"))
        await self.pool.close()
        for task in list(self._hand_offs):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def score(self, kind: Kind, items: Sequence[tuple[Any, ...]]) -> list[ModelOutcome]:
        """Score ``items`` (each ``(prompt, response, scope, step_ends)``) on a ``kind`` model, batched with whatever
        else is waiting; outcomes in order. Never raises for an item's failure (its outcome says it)."""
        if self._closed:
            return [ModelOutcome("error", detail="the reward models are shut down")] * len(items)
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        waiting = [_Waiting(kind, item, loop.create_future(), now) for item in items]
        self._queue.extend(waiting)
        self._schedule()
        # A caller that goes away (request cancelled) cancels its futures; the batcher then skips them.
        return list(await asyncio.gather(*(w.future for w in waiting)))

    # ------------------------------------------------------------------ batching (on the event loop)

    def _schedule(self, worker_freed: bool = False) -> None:
        """Hand batches to free workers: at once when a batch is full or a worker just freed up (the queue waited
        for it already), else after the oldest item has waited ``batch_wait_s``."""
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()
        while self._queue and self._in_flight < self.pool.num_workers:
            oldest = self._queue[0]
            waited = time.monotonic() - oldest.since
            if not (worker_freed or waited >= self.batch_wait_s or self._full(oldest.kind)):
                if self._timer is None:
                    self._timer = asyncio.get_running_loop().call_later(self.batch_wait_s - waited, self._on_timer)
                return
            self._hand_off(self._take(oldest.kind))
            worker_freed = False

    def _on_timer(self) -> None:
        self._timer = None
        self._schedule()

    def _full(self, kind: Kind) -> bool:
        count = 0
        for w in self._queue:
            if w.kind == kind and not w.future.done():
                count += 1
                if count >= self.batch_size:
                    return True
        return False

    def _take(self, kind: Kind) -> list[_Waiting]:
        """The oldest ``batch_size`` live items of ``kind``, out of the queue."""
        batch: list[_Waiting] = []
        rest: deque[_Waiting] = deque()
        for w in self._queue:
            if w.future.done():
                continue
            if w.kind == kind and len(batch) < self.batch_size:
                batch.append(w)
            else:
                rest.append(w)
        self._queue = rest
        return batch

    def _hand_off(self, batch: list[_Waiting]) -> None:
        self._in_flight += 1
        self.batches += 1
        self.batched_items += len(batch)
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._hand_offs.add(task)
        task.add_done_callback(self._hand_off_done)

    def _hand_off_done(self, task: asyncio.Task[None]) -> None:
        self._hand_offs.discard(task)
        self._in_flight -= 1
        if not self._closed:
            self._schedule(worker_freed=True)

    async def _run(self, batch: list[_Waiting]) -> None:
        kind = batch[0].kind
        try:
            outcome = await self.pool.submit((kind, [w.item for w in batch]), timeout_s=self.timeout_s)
        except RuntimeError as exc:  # the pool is closed
            outcomes = [ModelOutcome("error", detail=str(exc))] * len(batch)
        else:
            if outcome.status is TaskStatus.OK:
                outcomes = [
                    ModelOutcome("ok", v, None, n) if s == "ok" else ModelOutcome(s, None, v, n)
                    for s, v, n in outcome.value
                ]
            elif outcome.status is TaskStatus.TIMEOUT:
                detail = (
                    f"the model worker gave no scores for a batch of {len(batch)} within {self.timeout_s:g} s "
                    "(RLVR_REWARD_MODEL_TIMEOUT_S); the worker was replaced"
                )
                outcomes = [ModelOutcome("timeout", detail=detail)] * len(batch)
            else:
                outcomes = [ModelOutcome("error", detail=f"model worker: {outcome.detail}")] * len(batch)
        for w, o in zip(batch, outcomes, strict=True):
            if not w.future.done():
                w.future.set_result(o)
