"""Carrying a TRL or verl config over by the rules of :mod:`trainer.config.foreign`: :func:`convert` (``python -m
trainer convert``), :func:`foreign_hint` (the loader's fix-it for a TRL or verl name in our YAML) and
:func:`rules_table` (``docs/trainer/from_trl_verl.md``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.config.checks import ConfigError
from trainer.config.commands import GRPOConfig
from trainer.config.foreign import (
    IGNORED_NOTES,
    ORIGIN_NAMES,
    RULES,
    SOURCE_DEFAULTS,
    TRL_RULES,
    UNSET_NOTES,
    VERL_ACTOR,
    VERL_RULES,
    Origin,
    Rule,
    same_name,
)


@dataclass
class Conversion:
    """The result of :func:`convert`: our options, and what became of each source option.

    ``report`` holds ``mapped`` (source names), ``defaulted`` (``name: why``, the source's default used or ours
    kept), ``refused`` (``name: why``, dropped with a neutral value) and ``ignored`` (source names).
    """

    options: dict[str, Any]
    report: dict[str, list[str]] = dataclasses.field(
        default_factory=lambda: {"mapped": [], "defaulted": [], "refused": [], "ignored": []}
    )


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """verl's nested config as dotted paths (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def convert(source: Mapping[str, Any], kind: Origin) -> Conversion:
    """Our options from a TRL ``GRPOConfig`` dict (``to_dict()``) or a verl config (nested, as in its YAML).

    Raises:
        ConfigError: a refused option with a value that is not neutral, or a value with no counterpart (an
            ``adv_estimator`` without one, TRL's ``max_steps: -1``), each naming what to set instead.
    """
    flat = flatten(source) if kind == "verl" else dict(source)
    out = Conversion(options={})
    defaults = {k: v for k, v in SOURCE_DEFAULTS[kind].items() if k not in flat}
    if kind == "verl" and VERL_ACTOR + "optim.warmup_style" in flat:
        defaults.pop(VERL_ACTOR + "optim.lr_scheduler_type", None)  # the older spelling is set
    flat.update(defaults)
    for name, why in UNSET_NOTES[kind].items():
        if flat.get(name) is None:
            out.report["defaulted"].append(f"{name}: {why}")
    rules = {r.source: r for r in RULES if r.origin == kind}
    ours = {f.name for f in dataclasses.fields(GRPOConfig)}
    errors = []
    # the rules' own order, so that a later rule can refine an earlier one (loss_mode's loss_type after the
    # aggregation's), then the options no rule names
    order = [r for r in rules if r in flat] + [k for k in flat if k not in rules]
    for key in order:
        value, rule = flat[key], rules.get(key)
        if rule is None and kind == "trl" and key in ours:
            rule = same_name(key)
        if rule is None or rule.kind == "ignored":
            out.report["ignored"].append(key)
        elif rule.kind == "refused":
            assert rule.neutral is not None
            if rule.neutral(value, flat):
                out.report["refused"].append(f"{key}: {rule.note}")
            else:
                errors.append(f"{key}={value!r}: {rule.note}")
        else:
            assert rule.apply is not None
            try:
                options = {k: v for k, v in rule.apply(value, flat).items() if k}
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            out.options.update(options)
            if key in defaults:
                shown = ", ".join(f"{k}: {v!r}" for k, v in options.items()) or "nothing to set"
                out.report["defaulted"].append(f"{key}: {ORIGIN_NAMES[kind]}'s default {value!r} ({shown})")
            else:
                out.report["mapped"].append(key)
    if errors:
        raise ConfigError(f"{kind} config: options with no counterpart here:\n  " + "\n  ".join(errors))
    return out


# ---------------------------------------------------------------------------------------------------- fix-its


def _leaf_index() -> dict[str, Rule]:
    """verl rules by their last name (``kl_loss_coef``), where that name is unique, is not ours and says
    something alone (not ``n`` or ``path``)."""
    ours = {f.name for f in dataclasses.fields(GRPOConfig)}
    leaves: dict[str, list[Rule]] = {}
    for r in VERL_RULES:
        leaves.setdefault(r.source.rsplit(".", 1)[-1], []).append(r)
    vague = {"n", "path", "enable", "metric", "betas", "optimizer"}
    return {k: v[0] for k, v in leaves.items() if len(v) == 1 and k not in ours and k not in vague}


def foreign_hint(key: str) -> str | None:
    """The fix-it for an option name that is TRL's or verl's (a TRL name, a verl path or a verl path's last name),
    naming our option; ``None`` for any other name.

    ``foreign_hint("num_generations_eval")`` -> ``"is TRL's name; ours is eval_num_generations (...)"``, to follow
    ``option 'num_generations_eval' in FILE``.
    """
    trl = {r.source: r for r in TRL_RULES}
    verl = {r.source: r for r in VERL_RULES}
    rule = trl.get(key) or verl.get(key) or _leaf_index().get(key)
    if rule is None:
        return None
    who = ORIGIN_NAMES[rule.origin]
    where = f", {rule.source}" if rule.source != key else ""
    if rule.kind == "mapped":
        detail = rule.note.removeprefix(rule.ours).strip(" :,")
        if detail.startswith("(") and detail.endswith(")"):
            detail = detail[1:-1]
        return f"is {who}'s name{where}; ours is {rule.ours}" + (f" ({detail})" if detail else "")
    if rule.kind == "refused":
        nearest = f"; nearest option: {rule.ours}" if rule.ours else ""
        return f"is not supported ({who}'s option{where}): {rule.note}{nearest}"
    return f"has no effect here ({who}'s option{where}): {rule.note}; remove it"


# ---------------------------------------------------------------------------------------------------- docs


def rules_table() -> str:
    """The Markdown table of the rules (``docs/trainer/from_trl_verl.md`` is generated from it)."""
    lines = ["| from | option | becomes | ours | how |", "| --- | --- | --- | --- | --- |"]
    for r in RULES:
        kind = r.kind
        ours = f"`{r.ours}`" if r.ours else ""
        default = _default_note(r)
        lines.append(f"| {ORIGIN_NAMES[r.origin]} | `{r.source}` | {kind} | {ours} | {_cell(r.note)}{default} |")
    lines.append(
        "| TRL | any other option with one of our names | mapped | the same | the same value (null: our default) |"
    )
    for origin, note in IGNORED_NOTES.items():
        lines.append(f"| {ORIGIN_NAMES[origin]} | any other option | ignored | | {note} |")
    return "\n".join(lines)


def _default_note(rule: Rule) -> str:
    defaults = SOURCE_DEFAULTS[rule.origin]
    if rule.source in defaults:
        return f" **Unset: {ORIGIN_NAMES[rule.origin]}'s default `{defaults[rule.source]!r}`.**"
    if rule.source in UNSET_NOTES[rule.origin]:
        return f" **Unset: {UNSET_NOTES[rule.origin][rule.source]}.**"
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "/")
