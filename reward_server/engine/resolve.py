"""Resolution: the components an item names (weights, parameters, presets) -> validated
:class:`ResolvedComponent` lists, before any work starts.

A request (or an item) names components, e.g. ``{"accuracy": 1.0, "format": {"weight": 0.5, ...}}``, or a
preset (``r1_zero``, ``r1``). :func:`validate_request` (a request's batch, with its ``steps``) and
:func:`validate_batch` resolve a whole batch, so a bad item fails the request early with a
:class:`ComponentSpecError` whose ``loc`` names the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from reward_server.engine.components import REGISTRY, AccuracyParams, Component, reward_model_problem
from reward_server.engine.judge import JUDGE_UNSET
from reward_server.engine.reward_models import ModelCatalog
from reward_server.engine.steps import check_steps, with_request_steps
from reward_server.schemas.code import CodeAccuracyParams
from reward_server.schemas.reward_model import RewardModelParams
from reward_server.schemas.rewards import ComponentSpec, RewardItem
from reward_server.schemas.steps import StepsRequest
from reward_server.verifiers.code import extract_code, required_names

PRESETS: dict[str, dict[str, float]] = {
    # DeepSeek-R1-Zero: accuracy + format rewards (arXiv 2501.12948, section 2.2.2).
    "r1_zero": {"accuracy": 1.0, "format": 1.0},
    # DeepSeek-R1 adds the language-consistency reward, summed with accuracy (section 2.3.2).
    "r1": {"accuracy": 1.0, "format": 1.0, "language": 1.0},
}

DEFAULT_COMPONENTS: dict[str, float] = {"accuracy": 1.0}


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


def validate_request(
    items: list[RewardItem],
    request_components: Mapping[str, ComponentSpec] | None,
    request_preset: str | None,
    request_steps: StepsRequest | None,
    models: ModelCatalog | None = None,
    *,
    has_judge: bool | None = None,
) -> tuple[list[RewardItem], list[list[ResolvedComponent]]]:
    """A request's batch, ready to score: the request's ``steps`` given to the items that do not ask for their
    own, and every item's components resolved (:func:`validate_batch`).

    Raises:
        ComponentSpecError: with a ``loc`` from the request root; a step component the server cannot serve is
            ``("steps", "component")`` when the request named it; ``accuracy.judge`` on a server without a judge
            (``has_judge`` false; ``None``: not checked) is ``(..., "components", "accuracy", "judge")``.
    """
    if request_steps is not None and (problem := check_steps(request_steps, models)) is not None:
        # Named where it was sent: the request's own `steps`, not the first item that inherits it.
        raise ComponentSpecError(("steps", "component"), problem)
    items = with_request_steps(items, request_steps)
    resolved = validate_batch(items, request_components, request_preset, models)
    if has_judge is False:
        check_judge(resolved)
    return items, resolved


def check_judge(resolved: list[list[ResolvedComponent]]) -> None:
    """Refuse ``accuracy.judge`` on a server without a judge model, naming where it was asked for.

    Raises:
        ComponentSpecError: the first ``accuracy`` that asks for the judge.
    """
    for comps in resolved:
        for r in comps:
            if isinstance(r.params, AccuracyParams) and r.params.judge:
                raise ComponentSpecError((*r.loc, "judge"), JUDGE_UNSET)
