"""One rule of the TRL/verl carry-over table (:mod:`trainer.config.foreign`): what becomes of one source option,
and the constructors the tables are written with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainer.config.checks import ConfigError
from trainer.optim import LR_SCHEDULERS

Origin = Literal["trl", "verl"]
Kind = Literal["mapped", "refused", "ignored"]
Apply = Callable[[Any, Mapping[str, Any]], dict[str, Any]]
ORIGIN_NAMES: dict[str, str] = {"trl": "TRL", "verl": "verl"}


@dataclass(frozen=True)
class Rule:
    """What becomes of one source option.

    Attributes:
        origin: ``trl`` or ``verl``.
        source: the option's name (TRL) or dotted path (verl).
        kind: ``mapped``, ``refused`` or ``ignored``.
        ours: the option of ours it sets (``mapped``) or the nearest we have (``refused``); "" where none.
        note: for the docs, the report and the loader's fix-it: the translation, or why it is refused.
        apply: ``mapped`` only: ``(value, whole source) -> {our option: value}`` (may be empty: nothing to set).
        neutral: ``refused`` only: ``(value, whole source) -> True`` where dropping it changes nothing.
    """

    origin: Origin
    source: str
    kind: Kind
    ours: str
    note: str
    apply: Apply | None = None
    neutral: Callable[[Any, Mapping[str, Any]], bool] | None = None


def mapped(
    origin: Origin, source: str, ours: str, note: str = "", translate: Callable[[Any], Any] | None = None
) -> Rule:
    """A one-to-one rule: the value (translated) sets ``ours``; null leaves our default."""

    def apply(value: Any, _src: Mapping[str, Any]) -> dict[str, Any]:
        return {} if value is None else {ours: translate(value) if translate else value}

    return Rule(origin, source, "mapped", ours, note or ("the same" if source == ours else ours), apply)


def same_name(name: str) -> Rule:
    """A TRL option of one of our names without a rule of its own: the same value."""
    return mapped("trl", name, name)


def rule(origin: Origin, source: str, ours: str, note: str, apply: Apply) -> Rule:
    return Rule(origin, source, "mapped", ours, note, apply)


def refused(origin: Origin, source: str, ours: str, note: str, *neutral_values: Any) -> Rule:
    """Refused unless its value is one of ``neutral_values`` (compared with ==, so 0 matches 0.0)."""
    return Rule(origin, source, "refused", ours, note, neutral=lambda v, _s: any(v == n for n in neutral_values))


def refused_if(
    origin: Origin, source: str, ours: str, note: str, neutral: Callable[[Any, Mapping[str, Any]], bool]
) -> Rule:
    return Rule(origin, source, "refused", ours, note, neutral=neutral)


def ignored(origin: Origin, source: str, note: str) -> Rule:
    return Rule(origin, source, "ignored", "", note)


def names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def fail(name: str, value: Any, why: str) -> dict[str, Any]:
    raise ConfigError(f"{name}={value!r}: {why}")


def lr_scheduler(source: str) -> Callable[[Any], str]:
    """A schedule's name, checked against ours (TRL and verl spell theirs as we do)."""

    def translate(value: Any) -> str:
        if value not in LR_SCHEDULERS:
            fail(source, value, f"the schedules here are {list(LR_SCHEDULERS)} (after warmup_steps)")
        return str(value)

    return translate
