"""Step rewards for process supervision (DeepSeekMath, arXiv 2402.03300, section 4.1.3): a batch's items that ask
for ``steps`` get each step's span and score, beside their (unchanged) reward.

Two kinds of step component:

* rule-based (``arithmetic``, :mod:`reward_server.verifiers.steps`): a pure function of one step's text. The
  splitting and the checks of the whole batch run in one server thread, off the event loop.
* model-based (``prm``): a process reward model (``RLVR_PRM_PATH``) reads the prompt and the reasoning once and
  scores every step at its end, in a model worker (:mod:`reward_server.engine.reward_models`), batched with the
  other items. A step's score is the PRM's probability that it is correct; a step that truncation cut off has status
  ``truncated`` and no score, and when the model could not score the item at all (``timeout``, ``error``) every
  step has that status and no score, never 0.

A step that has no score is left out by the trainer (it adds nothing to any token's advantage); see
``trainer/steps.py``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence

from reward_server.engine.context import ScoringContext
from reward_server.engine.reward_models import ModelCatalog
from reward_server.schemas.rewards import RewardItem
from reward_server.schemas.steps import StepResult, StepsRequest
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.reward_model import step_probability
from reward_server.verifiers.steps import Step, score_arithmetic_step, split_steps

__all__ = ["RULE_STEP_COMPONENTS", "STEP_COMPONENTS", "check_steps", "score_steps", "with_request_steps"]

#: Rule-based step components: one step's text -> its score.
RULE_STEP_COMPONENTS: dict[str, Callable[[str], ComponentScore]] = {"arithmetic": score_arithmetic_step}
#: Model-based step components, by the model component (``ModelCatalog``) behind them.
MODEL_STEP_COMPONENTS: dict[str, str] = {"prm": "prm"}
STEP_COMPONENTS: tuple[str, ...] = tuple(sorted([*RULE_STEP_COMPONENTS, *MODEL_STEP_COMPONENTS]))


def with_request_steps(items: list[RewardItem], steps: StepsRequest | None) -> list[RewardItem]:
    """The items, with the request's ``steps`` given to those that do not ask for their own."""
    if steps is None:
        return items
    return [item if item.steps is not None else item.model_copy(update={"steps": steps}) for item in items]


def check_steps(request: StepsRequest, catalog: ModelCatalog | None) -> str | None:
    """Why ``request`` cannot be served here (an unknown step component, or a model this server lacks), else
    ``None``. Without a ``catalog`` (offline validation) model components are taken as available."""
    name = request.component
    if name not in STEP_COMPONENTS:
        return f"unknown step component {name!r}; valid: {', '.join(STEP_COMPONENTS)}"
    if name in MODEL_STEP_COMPONENTS and catalog is not None:
        why = catalog.reason(MODEL_STEP_COMPONENTS[name])
        if why is not None:
            return f"the {name!r} step component is unavailable: {why}"
    return None


def _split_and_check(items: Sequence[RewardItem]) -> list[tuple[list[Step], list[ComponentScore] | None]]:
    """Each item's steps, and their scores where a rule-based component gives them (``None`` for a model's)."""
    out: list[tuple[list[Step], list[ComponentScore] | None]] = []
    for item in items:
        assert item.steps is not None
        steps = split_steps(item.response, item.steps.separator, item.steps.scope)
        rule = RULE_STEP_COMPONENTS.get(item.steps.component)
        out.append((steps, None if rule is None else [_checked(rule, item.response[s.start : s.end]) for s in steps]))
    return out


def _checked(rule: Callable[[str], ComponentScore], text: str) -> ComponentScore:
    try:
        return rule(text)
    except Exception as exc:  # a bug in a rule costs its step, not the request
        return ComponentScore(None, "error", f"{type(exc).__name__}: {exc}"[:500])


def _step_result(step: Step, score: ComponentScore) -> StepResult:
    return StepResult(start=step.start, end=step.end, score=score.score, status=score.status, detail=score.detail)


async def score_steps(items: Sequence[RewardItem], ctx: ScoringContext) -> list[list[StepResult] | None]:
    """The step results of each item that asks for them (``None`` for the others), in item order."""
    asked = [i for i, item in enumerate(items) if item.steps is not None]
    out: list[list[StepResult] | None] = [None] * len(items)
    if not asked:
        return out
    # Splitting and the rule-based checks read whole completions: one thread for the batch, not the event loop.
    split = await asyncio.to_thread(_split_and_check, [items[i] for i in asked])
    to_model: list[tuple[int, list[Step]]] = []
    for i, (steps, scores) in zip(asked, split, strict=True):
        if scores is not None:
            out[i] = [_step_result(s, c) for s, c in zip(steps, scores, strict=True)]
        elif steps:
            to_model.append((i, steps))
        else:
            out[i] = []
    if to_model:
        results = await _score_with_prm(items, to_model, ctx)
        for (i, _), result in zip(to_model, results, strict=True):
            out[i] = result
    if ctx.metrics is not None:
        tally: Counter[tuple[str, str]] = Counter()
        for i in asked:
            request = items[i].steps
            assert request is not None
            tally.update((f"step:{request.component}", s.status) for s in out[i] or ())
        for (name, status), n in tally.items():
            ctx.metrics.verdicts.labels(name, status).inc(n)
    return out


async def _score_with_prm(
    items: Sequence[RewardItem], work: list[tuple[int, list[Step]]], ctx: ScoringContext
) -> list[list[StepResult]]:
    models = ctx.reward_models
    info = ctx.models.infos.get("prm")
    if models is None or info is None:
        why = ctx.models.reason("prm") or "the reward models are not running"
        return [[_step_result(s, ComponentScore(None, "error", why)) for s in steps] for _, steps in work]
    inputs = [(items[i].prompt, items[i].response, "response", [s.end for s in steps]) for i, steps in work]
    outcomes = await models.score("token", inputs)
    results = []
    for (_, steps), outcome in zip(work, outcomes, strict=True):
        if outcome.status != "ok":
            failed = ComponentScore(None, outcome.status, outcome.detail)
            results.append([_step_result(s, failed) for s in steps])
            continue
        row = []
        for step, logits in zip(steps, outcome.value, strict=True):
            if logits is None:
                why = f"past the PRM's length limit ({outcome.truncated_tokens} tokens cut)"
                row.append(_step_result(step, ComponentScore(None, "truncated", why)))
            else:
                row.append(_step_result(step, ComponentScore(step_probability(logits, info.label), "ok")))
        results.append(row)
    return results
