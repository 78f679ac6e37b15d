"""Composition: named components with weights -> one reward per item, with every component's outcome.

A request (or an item) names components, e.g. ``{"accuracy": 1.0, "format": {"weight": 0.5, ...}}``, or a
preset (``r1_zero``, ``r1``). Each component returns a :class:`~reward_server.verifiers.base.ComponentScore`;
the item's reward is the weighted sum, or ``None`` when a weighted component could not be scored (its
status then becomes the item's status). Each component says where it runs (:class:`Where`): the worker
pool (math ``accuracy``, ``format``, ``repetition``: one hand-off per group, under each item's deadline), a
server thread (``language``), the sandbox (code ``accuracy``) or the event loop (constant-time ones).

This module has no FastAPI in it: routers and the offline ``score`` command both call :func:`score_batch`.
"""

from __future__ import annotations

import asyncio
import enum
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reward_server.engine.pool import TaskOutcome, TaskStatus, WorkerPool
from reward_server.metrics import Metrics
from reward_server.models import ModelCatalog, RewardModels
from reward_server.schemas.code import CodeAccuracyParams
from reward_server.schemas.format import FormatParams
from reward_server.schemas.language import LanguageParams
from reward_server.schemas.math import MathOptionsModel
from reward_server.schemas.reward_model import RewardModelParams
from reward_server.schemas.rewards import ComponentResult, ComponentSpec, RewardItem, RewardResult
from reward_server.schemas.shaping import CosineParams, OverlongParams, RepetitionParams
from reward_server.step_rewards import check_steps, score_steps
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.code import code_options, extract_code, required_names, score_code
from reward_server.verifiers.format import score_format
from reward_server.verifiers.language import score_language
from reward_server.verifiers.math import MathStatus, MathVerdict, verify_payload
from reward_server.verifiers.reward_model import normalize_score
from reward_server.verifiers.shaping import score_cosine, score_overlong, score_repetition
from sandbox import Limits, Sandbox

# ============================================================================ context


@dataclass
class ScoringContext:
    """What scoring needs from the running service: pools, limits and metrics.

    Attributes:
        math_pool: the worker pool that runs :func:`reward_server.offload.score_item` (math accuracy and the
            other components marked :attr:`Where.WORKER`).
        math_timeout_s: default per-item limit; ``math_max_timeout_s`` caps a request's ``timeout_s``.
        request_budget_s: the most a batch may take; what is not scored by then is ``timeout`` (see
            :func:`score_batch`). ``None``: no budget.
        sandbox: the code sandbox, or ``None`` where code execution is unavailable (``sandbox_unavailable``
            says why).
        code_limits / code_max_limits: a code run's default limits, and the most a request may ask for.
        reward_models: the model workers (``reward_model``, ``prm``), or ``None`` where no model is configured;
            ``models`` says which the server has, and why the others are unavailable.
    """

    math_pool: WorkerPool
    math_timeout_s: float = 5.0
    math_max_timeout_s: float = 30.0
    request_budget_s: float | None = 60.0
    metrics: Metrics | None = None
    sandbox: Sandbox | None = None
    sandbox_unavailable: str | None = None
    code_limits: Limits = field(default_factory=Limits)
    code_max_limits: Limits = field(default_factory=Limits)
    reward_models: RewardModels | None = None
    models: ModelCatalog = field(default_factory=ModelCatalog.none)

    def math_item_timeout_s(self, options: MathOptionsModel | None) -> float:
        """One math item's limit: the request's ``timeout_s`` if any, capped by ``math_max_timeout_s``."""
        requested = options.timeout_s if options is not None else None
        return min(requested or self.math_timeout_s, self.math_max_timeout_s)


async def run_math(
    ctx: ScoringContext,
    response: str,
    ground_truth: str,
    options: MathOptionsModel | None = None,
    *,
    truncated: bool = False,
) -> MathVerdict:
    """Verify one math response on the pool, under its deadline; a hang is ``timeout``, a crash ``error``."""
    item = ItemFields(response, "math", ground_truth=ground_truth, truncated=truncated)
    params = AccuracyParams(math=options)
    payload = (item.as_tuple(), (("accuracy", params),))
    outcome = await ctx.math_pool.submit(payload, timeout_s=ctx.math_item_timeout_s(options))
    s = _worker_scores(outcome, ("accuracy",))["accuracy"]
    return MathVerdict(
        MathStatus(s.status),
        s.info.get("correct", False if s.status == MathStatus.NO_ANSWER else None),
        s.info.get("extracted_answer"),
        s.info.get("ground_truth_parsed"),
        s.detail,
    )


# ============================================================================ components


class AccuracyParams(BaseModel):
    """Parameters of the ``accuracy`` component (beside ``weight``)."""

    model_config = ConfigDict(extra="forbid")

    math: MathOptionsModel | None = Field(None, description="Math verification options.")
    code: CodeAccuracyParams | None = Field(None, description="Code options: language, extraction, limits.")


@dataclass(frozen=True, slots=True)
class ItemFields:
    """What a component that runs away from the request (in a worker process or a thread) sees of its item:
    the fields of :class:`RewardItem` that scoring reads, without the rest (code tests, ids)."""

    response: str
    task: str = "math"
    num_tokens: int | None = None
    language: str | None = None
    prompt: str | None = None
    ground_truth: str | None = None
    truncated: bool = False

    @classmethod
    def of(cls, item: RewardItem) -> ItemFields:
        return cls(
            item.response, item.task, item.num_tokens, item.language, item.prompt, item.ground_truth, item.truncated
        )

    def as_tuple(self) -> tuple[Any, ...]:
        """The fields in order, as the worker pool sends them (``ItemFields(*t)`` rebuilds them)."""
        return (
            self.response,
            self.task,
            self.num_tokens,
            self.language,
            self.prompt,
            self.ground_truth,
            self.truncated,
        )


@dataclass(frozen=True)
class ItemContext:
    """What an :attr:`Where.ASYNC` component sees of the item it scores."""

    item: RewardItem
    ctx: ScoringContext
    done: Mapping[str, ComponentScore]


class Where(enum.StrEnum):
    """Where a component's work runs. Nothing that costs CPU in the completion's length runs on the event
    loop (issue 14): a 100k-character completion takes tens of milliseconds to read."""

    INLINE = "inline"  # constant time (a length, another component's verdict): on the event loop
    WORKER = "worker"  # a pure function of the item: in the worker pool, in the item's group hand-off,
    #                    under the item's deadline, on every core
    THREAD = "thread"  # needs this process's state (the language models): one server thread per batch
    ASYNC = "async"  # waits on I/O (the code sandbox): one coroutine per item


ScoreFn = Callable[[ItemFields, Any, Mapping[str, ComponentScore]], ComponentScore]
ComponentFn = Callable[[ItemContext, Any], Awaitable[ComponentScore]]


@dataclass(frozen=True)
class Component:
    """A named reward component.

    Attributes:
        params: pydantic model of its parameters (``extra="forbid"``); ``weight`` is handled by the composer.
        where: where it runs (:class:`Where`). ``score`` is the work for ``INLINE``, ``WORKER`` and
            ``THREAD``: ``(item_fields, params, done) -> ComponentScore``, a module-level function (a worker
            imports it by name). ``run`` is the work for ``ASYNC``: ``async (item_context, params) ->
            ComponentScore``. ``accuracy`` has both: ``score`` for math items (in the pool), ``run`` for
            code items (on the sandbox).
        needs: components whose results it reads (``cosine`` reads ``accuracy``); they run first. Only an
            ``INLINE`` component may need others.
        neutral: statuses under which the component *abstains* rather than fails, with the score counted
            in the reward instead. Language abstains on a chain of thought too short to judge
            (``too_short``) and counts it as consistent (1.0): the sample is neither flagged nor dropped.
    """

    name: str
    description: str
    params: type[BaseModel]
    where: Where
    score: ScoreFn | None = None
    run: ComponentFn | None = None
    needs: tuple[str, ...] = ()
    neutral: Mapping[str, float] = field(default_factory=dict)

    def where_for(self, task: str) -> Where:
        """Where this component runs for an item of ``task`` (code accuracy waits on the sandbox)."""
        return Where.ASYNC if task == "code" and self.run is not None else self.where


def _math_accuracy(item: ItemFields, params: AccuracyParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    # In a worker: verify_payload keeps the worker's cache of parsed references (a group parses it once).
    assert item.ground_truth is not None  # enforced when the batch is validated
    options = params.math.model_dump(exclude={"timeout_s"}) if params.math is not None else {}
    v = verify_payload(
        {"response": item.response, "ground_truth": item.ground_truth, "options": options, "truncated": item.truncated}
    )
    info: dict[str, Any] = {"extracted_answer": v["extracted_answer"], "ground_truth_parsed": v["ground_truth_parsed"]}
    if v["correct"] is not None:
        info["correct"] = v["correct"]
    return ComponentScore(v["reward"], v["status"], v["detail"], info)


async def _code_accuracy(ic: ItemContext, params: AccuracyParams) -> ComponentScore:
    if ic.ctx.sandbox is None:
        return ComponentScore(
            None, "sandbox_error", ic.ctx.sandbox_unavailable or "code execution is not available on this server"
        )
    assert ic.item.tests is not None  # enforced when the batch is validated
    options = code_options(params.code or CodeAccuracyParams(), ic.ctx.code_limits, ic.ctx.code_max_limits)
    return await score_code(ic.item.response, ic.item.tests.to_spec(), options, ic.ctx.sandbox)


def code_program(item: RewardItem, resolved: list[ResolvedComponent]) -> str | None:
    """The program that a code item's ``accuracy`` would run: the fenced block its ``accuracy.code``
    options pick from the completion. ``None`` for a math item, one without ``accuracy`` or ``tests``,
    or a completion with no program."""
    accuracy = next((r for r in resolved if r.component.name == "accuracy"), None)
    if item.task != "code" or item.tests is None or accuracy is None:
        return None
    assert isinstance(accuracy.params, AccuracyParams)
    params = accuracy.params.code or CodeAccuracyParams()
    return extract_code(
        item.response,
        params.language,
        code_block=params.code_block,
        after_think=params.after_think,
        required=required_names(params.language, item.tests.to_spec()),
    )


def _format(item: ItemFields, params: FormatParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_format(item.response, params)


def _language(item: ItemFields, params: LanguageParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_language(item.response, params, target=item.language, prompt=item.prompt)


def _overlong(item: ItemFields, params: OverlongParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_overlong(item.response, params, num_tokens=item.num_tokens)


def _cosine(item: ItemFields, params: CosineParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    accuracy = done["accuracy"]
    # Math states correctness; for code, correct means every test passed.
    correct = accuracy.info.get("correct", None if accuracy.score is None else accuracy.score == 1.0)
    result = score_cosine(item.response, params, correct=correct, num_tokens=item.num_tokens)
    if result.score is None:
        # Say why accuracy gave no verdict, so the cosine row alone explains itself.
        return replace(
            result, detail=f"{result.detail}: accuracy is {accuracy.status} ({accuracy.detail or 'no detail'})"
        )
    return result


def _repetition(item: ItemFields, params: RepetitionParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_repetition(item.response, params)


def reward_model_problem(params: RewardModelParams, catalog: ModelCatalog) -> str | None:
    """Why ``reward_model`` with ``params`` cannot run on this server (no model, a label it lacks, a
    normalisation it cannot do), else ``None``."""
    why = catalog.reason("reward_model")
    if why is not None:
        return f"the reward_model component is unavailable: {why}"
    info = catalog.infos["reward_model"]
    if params.label >= info.num_labels:
        return f"label {params.label} is out of range: the reward model has {info.num_labels} label(s)"
    if params.normalize == "softmax" and info.num_labels < 2:
        return "softmax over a single label is always 1: use sigmoid"
    if params.normalize == "standardize" and None in (
        params.mean if params.mean is not None else info.mean,
        params.std if params.std is not None else info.std,
    ):
        return "standardize needs mean and std: give them, or use a model whose config.json has them"
    return None


async def _reward_model(ic: ItemContext, params: RewardModelParams) -> ComponentScore:
    models = ic.ctx.reward_models
    problem = reward_model_problem(params, ic.ctx.models)
    if problem is not None or models is None:  # validation turns these into a 422 first
        return ComponentScore(None, "unavailable", problem or "the reward models are not running")
    info = ic.ctx.models.infos["reward_model"]
    [outcome] = await models.score("sequence", [(ic.item.prompt, ic.item.response, params.scope, None)])
    if outcome.status != "ok":
        return ComponentScore(None, outcome.status, outcome.detail)
    score = normalize_score(
        outcome.value,
        label=params.label,
        normalize=params.normalize,
        mean=params.mean if params.mean is not None else info.mean,
        std=params.std if params.std is not None else info.std,
    )
    info_out: dict[str, Any] = {"logits": outcome.value}
    if outcome.truncated_tokens:
        info_out["truncated_tokens"] = outcome.truncated_tokens
    return ComponentScore(score, "ok", None, info_out)


REGISTRY: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "accuracy",
            "Is the answer right? Math: final-answer equivalence (1/0). Code: share of tests passed.",
            AccuracyParams,
            Where.WORKER,
            score=_math_accuracy,
            run=_code_accuracy,
        ),
        Component(
            "format",
            "R1 layout: <think>...</think> then the answer (1.0 exactly).",
            FormatParams,
            Where.WORKER,
            score=_format,
        ),
        Component(
            "language",
            "Share of the chain of thought's words in the target language (DeepSeek-R1).",
            LanguageParams,
            Where.THREAD,
            score=_language,
            neutral={"too_short": 1.0},
        ),
        Component(
            "overlong", "DAPO soft overlong punishment, in [-1, 0].", OverlongParams, Where.INLINE, score=_overlong
        ),
        Component(
            "cosine",
            "Length-scaled reward by correctness (Yeo et al. 2025).",
            CosineParams,
            Where.INLINE,
            score=_cosine,
            needs=("accuracy",),
        ),
        Component(
            "repetition",
            "n-gram repetition penalty, in [max_penalty, 0].",
            RepetitionParams,
            Where.WORKER,
            score=_repetition,
        ),
        Component(
            "reward_model",
            "A sequence-classification reward model's score (RLVR_REWARD_MODEL_PATH; DeepSeek-R1 phase 4).",
            RewardModelParams,
            Where.ASYNC,  # waits on the model workers (reward_server.models)
            run=_reward_model,
        ),
    )
}
assert all(not c.needs or c.where is Where.INLINE for c in REGISTRY.values()), "only INLINE components may need"

PRESETS: dict[str, dict[str, float]] = {
    # DeepSeek-R1-Zero: accuracy + format rewards (arXiv 2501.12948, section 2.2.2).
    "r1_zero": {"accuracy": 1.0, "format": 1.0},
    # DeepSeek-R1 adds the language-consistency reward, summed with accuracy (section 2.3.2).
    "r1": {"accuracy": 1.0, "format": 1.0, "language": 1.0},
}

DEFAULT_COMPONENTS: dict[str, float] = {"accuracy": 1.0}

# ============================================================================ resolution


class ComponentSpecError(ValueError):
    """A component name, preset or parameter is invalid. ``loc`` is the path inside the item/request."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


@dataclass(frozen=True)
class ResolvedComponent:
    component: Component
    weight: float
    params: BaseModel
    loc: tuple[str | int, ...] = ()  # where it was named, for errors found later


def available_presets() -> dict[str, dict[str, float]]:
    """Presets whose components are all registered on this server."""
    return {k: v for k, v in PRESETS.items() if all(name in REGISTRY for name in v)}


def _check_preset(name: str, loc: tuple[str | int, ...]) -> dict[str, float]:
    if name not in PRESETS:
        raise ComponentSpecError(
            loc, f"unknown preset {name!r}; valid presets: {', '.join(sorted(PRESETS))} (or null for none)"
        )
    return PRESETS[name]


# Weights and float parameters must be finite and bounded, so a reward is always a finite number.
_MAX_ABS = 1e6


def _finite(x: float) -> bool:
    try:
        return math.isfinite(x) and abs(x) <= _MAX_ABS
    except OverflowError:  # a JSON integer too large for any float
        return False


def _non_finite_field(values: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """The path of the first float in ``values`` that is NaN, infinite or over ``_MAX_ABS``, or ``None``."""
    if isinstance(values, float) and not _finite(values):
        return path
    items = (
        values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list | tuple) else ()
    )
    for key, value in items:
        found = _non_finite_field(value, (*path, key))
        if found is not None:
            return found
    return None


def resolve_components(
    item_components: Mapping[str, ComponentSpec] | None,
    item_preset: str | None,
    request_components: Mapping[str, ComponentSpec] | None = None,
    request_preset: str | None = None,
    *,
    item_loc: tuple[str | int, ...] = (),
) -> list[ResolvedComponent]:
    """Merge preset and explicit components (item over request, explicit over preset) and validate them.

    ``item_loc`` prefixes the ``loc`` of errors in the item's own fields (e.g. ``("items", 3)``); errors in
    the request's fields have a ``loc`` from the request root.

    Raises:
        ComponentSpecError: an unknown component or preset (the message lists the valid names), a bad
            weight, or a bad parameter (the message names it).
    """
    specs: dict[str, tuple[ComponentSpec, tuple[str | int, ...]]] = {}
    for preset, loc in ((request_preset, ("preset",)), (item_preset, (*item_loc, "preset"))):
        # "" is not "no preset": a blank config value would otherwise drop the preset's components silently.
        if preset is not None:
            for name, weight in _check_preset(preset, loc).items():
                specs[name] = (weight, loc)
    for comps, base in ((request_components, ()), (item_components, item_loc)):
        for name, spec in (comps or {}).items():
            prev = specs.get(name)
            if isinstance(spec, dict) and "weight" not in spec and prev is not None and isinstance(prev[0], float):
                spec = {"weight": prev[0], **spec}  # parameters without a weight keep the preset's weight
            specs[name] = (spec, (*base, "components", name))
    if not specs:
        specs = {name: (w, ("components", name)) for name, w in DEFAULT_COMPONENTS.items()}

    resolved = []
    for name, (spec, loc) in specs.items():
        component = REGISTRY.get(name)
        if component is None:
            raise ComponentSpecError(
                loc, f"unknown component {name!r}; valid components: {', '.join(sorted(REGISTRY))}"
            )
        if isinstance(spec, bool) or not isinstance(spec, int | float | dict):
            raise ComponentSpecError(loc, "a component is a weight (number) or an object {'weight': w, ...params}")
        raw = {"weight": spec} if isinstance(spec, int | float) else dict(spec)
        weight = raw.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not _finite(weight):
            raise ComponentSpecError((*loc, "weight"), f"weight must be a number with |weight| <= {_MAX_ABS:g}")
        try:
            params = component.params.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            path = ".".join(str(p) for p in err["loc"])
            raise ComponentSpecError((*loc, *err["loc"]), f"{name}.{path}: {err['msg']}") from exc
        bad = _non_finite_field(params.model_dump())
        if bad is not None:
            raise ComponentSpecError(
                (*loc, *bad), f"{name}.{'.'.join(map(str, bad))}: must be finite, |x| <= {_MAX_ABS:g}"
            )
        resolved.append(ResolvedComponent(component, float(weight), params, loc))
    return resolved


# ============================================================================ scoring


def _check_item(item: RewardItem, resolved: list[ResolvedComponent]) -> None:
    names = {r.component.name for r in resolved}
    if "accuracy" in names:
        if item.task == "math" and item.ground_truth is None:
            raise ComponentSpecError(("ground_truth",), "ground_truth is required for math items")
        if item.task == "code" and item.tests is None:
            raise ComponentSpecError(("tests",), "tests are required for code items")
    for r in resolved:
        for need in r.component.needs:
            if need not in names:
                raise ComponentSpecError(
                    ("components", r.component.name), f"component {r.component.name!r} needs {need!r} as well"
                )


def validate_batch(
    items: list[RewardItem],
    request_components: Mapping[str, ComponentSpec] | None,
    request_preset: str | None,
    models: ModelCatalog | None = None,
) -> list[list[ResolvedComponent]]:
    """Resolve every item's components before any work starts, so a bad item fails the request early.

    ``models`` (the server's :class:`ModelCatalog`) also rejects a model component the server lacks, or one
    whose parameters its model cannot serve; without it they are not checked here.

    Raises:
        ComponentSpecError: with a ``loc`` from the request root, e.g. ``("items", 3, "components", "foo")``.
    """
    out = []
    seen: dict[str, int] = {}
    shared: list[ResolvedComponent] | None = None
    for i, item in enumerate(items):
        if item.id in seen:
            raise ComponentSpecError(
                ("items", i, "id"),
                f"duplicate id {item.id!r} (also item {seen[item.id]}); ids must be unique in a batch",
            )
        seen[item.id] = i
        if item.steps is not None:
            problem = check_steps(item.steps, models)
            if problem is not None:
                raise ComponentSpecError(("items", i, "steps", "component"), problem)
        if item.components is None and item.preset is None:
            # Most batches name components once, for every item: resolve them once (one shared list).
            if shared is None:
                shared = resolve_components(None, None, request_components, request_preset)
            resolved = shared
        else:
            resolved = resolve_components(
                item.components, item.preset, request_components, request_preset, item_loc=("items", i)
            )
        for r in resolved:
            if models is not None and isinstance(r.params, RewardModelParams):
                problem = reward_model_problem(r.params, models)
                if problem is not None:
                    raise ComponentSpecError(r.loc, problem)
        try:
            _check_item(item, resolved)
        except ComponentSpecError as exc:
            raise ComponentSpecError(("items", i, *exc.loc), exc.msg) from exc
        out.append(resolved)
    return out


def _root_status(component: Component, result: ComponentScore, done: Mapping[str, ComponentScore]) -> str:
    """The status that says why ``component`` could not be scored: that of a component it needs which could
    not be scored either (cosine without an accuracy verdict is ``invalid_ground_truth`` or ``timeout``,
    which a trainer acts on, even when accuracy's own weight is 0), else its own."""
    for need in component.needs:
        if done[need].score is None:
            return done[need].status
    return result.status


# How many items one hand-off to a worker carries at most, and how much text: a group's completions share a
# reference, so a worker parses it once; a bound keeps one request's piece from holding a worker for long.
_PIECE_ITEMS = 32
_PIECE_CHARS = 400_000


CANCELLED = "cancelled"
"""The status of an item the server stopped scoring (its drain ran out of time at shutdown): reward ``null``."""
_DRAIN_DETAIL = "the server shut down before this was scored (RLVR_DRAIN_S ran out); score it again"


def _budget_detail(budget_s: float) -> str:
    return f"the request's budget of {budget_s:g} s (RLVR_REQUEST_BUDGET_S) ran out before this was scored"


def _worker_scores(outcome: TaskOutcome, names: Sequence[str]) -> dict[str, ComponentScore]:
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


async def _score_components(
    items: list[RewardItem],
    resolved: list[list[ResolvedComponent]],
    ctx: ScoringContext,
    *,
    drain_stop: asyncio.Event | None = None,
) -> list[RewardResult]:
    """The components of a validated batch; results in item order, exactly one per item.

    Each component runs where :class:`Where` says, all at once: the items' ``WORKER`` components go to the
    pool in one hand-off per group (completions that share a reference), ``THREAD`` ones to one server
    thread, ``ASYNC`` ones (code) to the sandbox; ``INLINE`` ones follow on the loop. The batch is one
    :class:`~reward_server.engine.pool.Flow` of the pool, so other requests get their share meanwhile. What has
    no score when ``ctx.request_budget_s`` runs out is ``timeout``, so a batch never takes much longer
    than its budget. When ``drain_stop`` is set first (the server's drain ran out of time at shutdown), what has no
    score yet is :data:`CANCELLED` instead, and the finished items keep their results.
    """
    start = time.perf_counter()
    done: list[dict[str, ComponentScore]] = [{} for _ in items]
    fields = [ItemFields.of(item) for item in items]
    to_workers: list[_WorkerItem] = []
    to_thread: list[tuple[int, Component, ItemFields, BaseModel]] = []
    to_sandbox: list[tuple[int, ResolvedComponent]] = []
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
            done[w.index].update(_worker_scores(outcome, [name for name, _ in w.payload[1]]))

    async def run_async(i: int, r: ResolvedComponent) -> None:
        assert r.component.run is not None
        done[i][r.component.name] = await r.component.run(ItemContext(items[i], ctx, {}), r.params)

    on_pool = [asyncio.ensure_future(run_piece(p)) for p in _pieces(to_workers, ctx.math_pool.num_workers)]
    elsewhere = [asyncio.ensure_future(run_async(i, r)) for i, r in to_sandbox]
    if to_thread:
        elsewhere.append(asyncio.ensure_future(asyncio.to_thread(_in_thread, to_thread, thread_out, stop)))
    budget_s = ctx.request_budget_s
    late_status, late_detail = "timeout", _budget_detail(budget_s or 0.0)
    drained = asyncio.ensure_future(drain_stop.wait()) if drain_stop is not None else None
    try:
        if on_pool or elsewhere:
            work = asyncio.ensure_future(asyncio.wait([*on_pool, *elsewhere]))
            waiting = [work, *([drained] if drained is not None else [])]
            await asyncio.wait(waiting, timeout=budget_s, return_when=asyncio.FIRST_COMPLETED)
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
        _combine(item, comps, done[i], fields[i], late_status, late_detail, tally)
        for i, (item, comps) in enumerate(zip(items, resolved, strict=True))
    ]
    if ctx.metrics is not None:
        # One update per (component, status) and per task, not per item: label lookups cost microseconds.
        m = ctx.metrics
        for (name, status), n in tally.items():
            m.verdicts.labels(name, status).inc(n)
            if status == "timeout":
                m.timeouts.labels(name).inc(n)
        for kind, n in Counter(item.task for item in items).items():
            m.items.labels(kind).inc(n)
        latency, elapsed = m.item_latency.labels("item"), time.perf_counter() - start
        for _ in items:
            latency.observe(elapsed)
    return results


def _combine(
    item: RewardItem,
    resolved: list[ResolvedComponent],
    done: dict[str, ComponentScore],
    fields: ItemFields,
    late_status: str,
    late_detail: str,
    tally: Counter[tuple[str, str]],
) -> RewardResult:
    """Run the item's ``INLINE`` components (after what they need), then weigh everything into its result;
    a component left unscored (the budget or the drain ran out) gets ``late_status``."""
    for r in resolved:
        if r.component.name not in done and r.component.where_for(item.task) is not Where.INLINE:
            done[r.component.name] = ComponentScore(None, late_status, late_detail)
    pending = [r for r in resolved if r.component.name not in done]
    while pending:
        ready = [r for r in pending if all(n in done for n in r.component.needs)]
        for r in ready:
            assert r.component.score is not None
            done[r.component.name] = r.component.score(fields, r.params, done)
        pending = [r for r in pending if r not in ready]

    components: dict[str, ComponentResult] = {}
    reward: float | None = 0.0
    status = "ok"
    for r in resolved:
        s = done[r.component.name]
        score = s.score if s.score is not None else r.component.neutral.get(s.status)
        detail = s.detail
        if s.score is None and score is not None:
            detail = f"{detail or s.status}; abstained, counted as {score:g} in the reward"
        components[r.component.name] = ComponentResult(
            score=s.score, weight=r.weight, status=s.status, detail=detail, info=s.info
        )
        if r.weight == 0:
            continue
        if score is None:
            if reward is not None:
                status = _root_status(r.component, s, done)
            reward = None
        elif reward is not None:
            reward += r.weight * score
        tally[r.component.name, s.status] += 1
    return RewardResult(id=item.id, reward=reward, status=status, components=components)


async def score_batch(
    items: list[RewardItem],
    resolved: list[list[ResolvedComponent]],
    ctx: ScoringContext,
    drain_stop: asyncio.Event | None = None,
) -> list[RewardResult]:
    """Score a validated batch; results in item order, exactly one per item.

    The components run as :func:`_score_components` says (``drain_stop``: see there); step rewards, for the
    items that ask for them, are scored beside them (:mod:`reward_server.step_rewards`).
    """
    results, steps = await asyncio.gather(
        _score_components(items, resolved, ctx, drain_stop=drain_stop), score_steps(items, ctx)
    )
    for result, item_steps in zip(results, steps, strict=True):
        result.steps = item_steps
    return results
