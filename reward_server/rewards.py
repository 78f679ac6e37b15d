"""Composition: named components with weights -> one reward per item, with every component's outcome.

A request (or an item) names components, e.g. ``{"accuracy": 1.0, "format": {"weight": 0.5, ...}}``, or a
preset (``r1_zero``, ``r1``). Each component returns a :class:`~reward_server.verifiers.base.ComponentScore`;
the item's reward is the weighted sum, or ``None`` when a weighted component could not be scored (its
status then becomes the item's status). ``accuracy`` dispatches on the item's task: math items go to the
worker pool under a per-item deadline.

This module has no FastAPI in it: routers and the offline ``score`` command both call :func:`score_batch`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reward_server.metrics import Metrics
from reward_server.schemas.code import CodeAccuracyParams
from reward_server.schemas.format import FormatParams
from reward_server.schemas.language import LanguageParams
from reward_server.schemas.math import MathOptionsModel
from reward_server.schemas.rewards import ComponentResult, ComponentSpec, RewardItem, RewardResult
from reward_server.schemas.shaping import CosineParams, OverlongParams, RepetitionParams
from reward_server.schemas.steps import StepResult, StepsRequest
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.code import code_options, extract_code, required_names, score_code
from reward_server.verifiers.format import score_format
from reward_server.verifiers.language import score_language
from reward_server.verifiers.math import MathStatus, MathVerdict
from reward_server.verifiers.shaping import score_cosine, score_overlong, score_repetition
from reward_server.verifiers.steps import score_arithmetic_step, split_steps
from reward_server.workers import TaskStatus, WorkerPool
from sandbox import Limits, Sandbox

# ============================================================================ context


@dataclass
class ScoringContext:
    """What scoring needs from the running service: pools, limits and metrics.

    Attributes:
        math_pool: the worker pool that runs ``reward_server.verifiers.math:verify_payload``.
        math_timeout_s: default per-item limit; ``math_max_timeout_s`` caps a request's ``timeout_s``.
        sandbox: the code sandbox, or ``None`` where code execution is unavailable (``sandbox_unavailable``
            says why).
        code_limits / code_max_limits: a code run's default limits, and the most a request may ask for.
    """

    math_pool: WorkerPool
    math_timeout_s: float = 5.0
    math_max_timeout_s: float = 30.0
    metrics: Metrics | None = None
    sandbox: Sandbox | None = None
    sandbox_unavailable: str | None = None
    code_limits: Limits = field(default_factory=Limits)
    code_max_limits: Limits = field(default_factory=Limits)


async def run_math(
    ctx: ScoringContext, response: str, ground_truth: str, options: MathOptionsModel | None = None
) -> MathVerdict:
    """Verify one math response on the pool, under its deadline; a hang is ``timeout``, a crash ``error``."""
    options = options or MathOptionsModel()
    timeout_s = min(options.timeout_s or ctx.math_timeout_s, ctx.math_max_timeout_s)
    payload = {
        "response": response,
        "ground_truth": ground_truth,
        "options": options.model_dump(exclude={"timeout_s"}),
        "timeout_s": timeout_s,
    }
    outcome = await ctx.math_pool.submit(payload, timeout_s=timeout_s, affinity_key=ground_truth)
    if outcome.status is TaskStatus.OK:
        v = outcome.value
        return MathVerdict(
            MathStatus(v["status"]), v["correct"], v["extracted_answer"], v["ground_truth_parsed"], v["detail"]
        )
    if outcome.status is TaskStatus.TIMEOUT:
        return MathVerdict(MathStatus.TIMEOUT, None, detail=outcome.detail)
    return MathVerdict(MathStatus.ERROR, None, detail=outcome.detail)


# ============================================================================ components


class AccuracyParams(BaseModel):
    """Parameters of the ``accuracy`` component (beside ``weight``)."""

    model_config = ConfigDict(extra="forbid")

    math: MathOptionsModel | None = Field(None, description="Math verification options.")
    code: CodeAccuracyParams | None = Field(None, description="Code options: language, extraction, limits.")


@dataclass(frozen=True)
class ItemContext:
    """What a component sees of the item it scores."""

    item: RewardItem
    ctx: ScoringContext
    done: Mapping[str, ComponentScore]


ComponentFn = Callable[[ItemContext, Any], Awaitable[ComponentScore]]


@dataclass(frozen=True)
class Component:
    """A named reward component.

    Attributes:
        params: pydantic model of its parameters (``extra="forbid"``); ``weight`` is handled by the composer.
        run: ``async (item_context, params) -> ComponentScore``.
        needs: components whose results it reads (``cosine`` reads ``accuracy``); they run first.
        neutral: statuses under which the component *abstains* rather than fails, with the score counted
            in the reward instead. Language abstains on a chain of thought too short to judge
            (``too_short``) and counts it as consistent (1.0): the sample is neither flagged nor dropped.
    """

    name: str
    description: str
    params: type[BaseModel]
    run: ComponentFn
    needs: tuple[str, ...] = ()
    neutral: Mapping[str, float] = field(default_factory=dict)


async def _accuracy(ic: ItemContext, params: AccuracyParams) -> ComponentScore:
    item = ic.item
    if item.task == "math":
        assert item.ground_truth is not None  # enforced when the batch is validated
        v = await run_math(ic.ctx, item.response, item.ground_truth, params.math)
        info: dict[str, Any] = {"extracted_answer": v.extracted_answer, "ground_truth_parsed": v.ground_truth_parsed}
        if v.correct is not None:
            info["correct"] = v.correct
        return ComponentScore(v.reward, str(v.status), v.detail, info)
    return await _code_accuracy(ic, params)


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


async def _format(ic: ItemContext, params: FormatParams) -> ComponentScore:
    return score_format(ic.item.response, params)


async def _language(ic: ItemContext, params: LanguageParams) -> ComponentScore:
    # Word-level detection costs up to tens of ms on a long chain of thought: keep it off the event loop.
    return await asyncio.to_thread(
        score_language, ic.item.response, params, target=ic.item.language, prompt=ic.item.prompt
    )


async def _overlong(ic: ItemContext, params: OverlongParams) -> ComponentScore:
    return score_overlong(ic.item.response, params, num_tokens=ic.item.num_tokens)


async def _cosine(ic: ItemContext, params: CosineParams) -> ComponentScore:
    accuracy = ic.done["accuracy"]
    # Math states correctness; for code, correct means every test passed.
    correct = accuracy.info.get("correct", None if accuracy.score is None else accuracy.score == 1.0)
    result = score_cosine(ic.item.response, params, correct=correct, num_tokens=ic.item.num_tokens)
    if result.score is None:
        # Say why accuracy gave no verdict, so the cosine row alone explains itself.
        return replace(
            result, detail=f"{result.detail}: accuracy is {accuracy.status} ({accuracy.detail or 'no detail'})"
        )
    return result


async def _repetition(ic: ItemContext, params: RepetitionParams) -> ComponentScore:
    return score_repetition(ic.item.response, params)


REGISTRY: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "accuracy",
            "Is the answer right? Math: final-answer equivalence (1/0). Code: share of tests passed.",
            AccuracyParams,
            _accuracy,
        ),
        Component("format", "R1 layout: <think>...</think> then the answer (1.0 exactly).", FormatParams, _format),
        Component(
            "language",
            "Share of the chain of thought's words in the target language (DeepSeek-R1).",
            LanguageParams,
            _language,
            neutral={"too_short": 1.0},
        ),
        Component("overlong", "DAPO soft overlong punishment, in [-1, 0].", OverlongParams, _overlong),
        Component(
            "cosine", "Length-scaled reward by correctness (Yeo et al. 2025).", CosineParams, _cosine, ("accuracy",)
        ),
        Component("repetition", "n-gram repetition penalty, in [max_penalty, 0].", RepetitionParams, _repetition),
    )
}

PRESETS: dict[str, dict[str, float]] = {
    # DeepSeek-R1-Zero: accuracy + format rewards (arXiv 2501.12948, section 2.2.2).
    "r1_zero": {"accuracy": 1.0, "format": 1.0},
    # DeepSeek-R1 adds the language-consistency reward, summed with accuracy (section 2.3.2).
    "r1": {"accuracy": 1.0, "format": 1.0, "language": 1.0},
}

DEFAULT_COMPONENTS: dict[str, float] = {"accuracy": 1.0}

#: Step components: one step's text -> its score (process supervision; ``verifiers/steps.py``).
STEP_COMPONENTS: dict[str, Callable[[str], ComponentScore]] = {"arithmetic": score_arithmetic_step}


def with_request_steps(items: list[RewardItem], steps: StepsRequest | None) -> list[RewardItem]:
    """The items, with the request's ``steps`` given to those that do not ask for their own."""
    if steps is None:
        return items
    return [item if item.steps is not None else item.model_copy(update={"steps": steps}) for item in items]


def score_steps(response: str, request: StepsRequest) -> list[StepResult]:
    """Split ``response`` into steps and score each with the requested step component (see ``verifiers/steps``)."""
    component = STEP_COMPONENTS[request.component]
    out = []
    for step in split_steps(response, request.separator, request.scope):
        s = component(response[step.start : step.end])
        out.append(StepResult(start=step.start, end=step.end, score=s.score, status=s.status, detail=s.detail))
    return out


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
        resolved.append(ResolvedComponent(component, float(weight), params))
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
) -> list[list[ResolvedComponent]]:
    """Resolve every item's components before any work starts, so a bad item fails the request early.

    Raises:
        ComponentSpecError: with a ``loc`` from the request root, e.g. ``("items", 3, "components", "foo")``.
    """
    out = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.id in seen:
            raise ComponentSpecError(
                ("items", i, "id"),
                f"duplicate id {item.id!r} (also item {seen[item.id]}); ids must be unique in a batch",
            )
        seen[item.id] = i
        if item.steps is not None and item.steps.component not in STEP_COMPONENTS:
            raise ComponentSpecError(
                ("items", i, "steps", "component"),
                f"unknown step component {item.steps.component!r}; valid: {', '.join(sorted(STEP_COMPONENTS))}",
            )
        resolved = resolve_components(
            item.components, item.preset, request_components, request_preset, item_loc=("items", i)
        )
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


async def score_item(item: RewardItem, resolved: list[ResolvedComponent], ctx: ScoringContext) -> RewardResult:
    """Run an item's components (independent ones concurrently) and combine them."""
    start = time.perf_counter()
    done: dict[str, ComponentScore] = {}
    pending = list(resolved)
    while pending:
        ready = [r for r in pending if all(n in done for n in r.component.needs)]
        ic = ItemContext(item, ctx, dict(done))
        scores = await asyncio.gather(*(r.component.run(ic, r.params) for r in ready))
        for r, s in zip(ready, scores, strict=True):
            done[r.component.name] = s
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
        if ctx.metrics is not None:
            ctx.metrics.verdicts.labels(r.component.name, s.status).inc()
            if s.status == "timeout":
                ctx.metrics.timeouts.labels(r.component.name).inc()
    steps = None
    if item.steps is not None:  # regex work over the whole completion: off the event loop
        steps = await asyncio.to_thread(score_steps, item.response, item.steps)
    if ctx.metrics is not None:
        ctx.metrics.items.labels(item.task).inc()
        ctx.metrics.item_latency.labels("item").observe(time.perf_counter() - start)
    return RewardResult(id=item.id, reward=reward, status=status, components=components, steps=steps)


async def score_batch(
    items: list[RewardItem],
    resolved: list[list[ResolvedComponent]],
    ctx: ScoringContext,
) -> list[RewardResult]:
    """Score a validated batch; results in item order, exactly one per item.

    All items are submitted at once: math items spread over the pool's workers (a group's reference is
    parsed once, on the worker that holds it), code items over the sandbox pool.
    """
    return list(await asyncio.gather(*(score_item(it, rc, ctx) for it, rc in zip(items, resolved, strict=True))))
