"""A config from TRL or verl, carried over: one table of rules per source, read by ``python -m trainer convert``
and rendered into ``docs/trainer/from_trl_verl.md`` (``docs/hooks/reference.py``), so the docs and the code cannot
drift.

Each rule names a source option and says what becomes of it:

* **mapped**: it sets one of our options, with its value translated where the two spell it differently;
* **refused**: we have no counterpart. A refused option whose value is *neutral* (its default, or a value that
  changes nothing) is reported and dropped; any other value is an error naming our nearest option, since
  dropping it would silently train something else;
* **ignored**: it changes no training math (logging, the hub, hardware placement).

TRL's ``GRPOConfig`` mostly uses our names already: every TRL option of the same name maps unchanged (its value,
TRL's default included, is kept: ``use_bias_correction_kl`` is true in TRL and so in the converted config), and the
table lists only the options that differ. verl's config is nested: its rules use dotted paths of its
``ppo_trainer.yaml`` (``algorithm.adv_estimator``, ``actor_rollout_ref.actor.loss_agg_mode``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainer.config.checks import ConfigError
from trainer.config.commands import GRPOConfig

Kind = Literal["mapped", "refused", "ignored"]


@dataclass(frozen=True)
class Rule:
    """What becomes of one source option.

    Attributes:
        source: the option's name (TRL) or dotted path (verl).
        kind: ``mapped``, ``refused`` or ``ignored``.
        note: for the docs and the report: the translation, or why it is refused and what to use instead.
        apply: ``mapped`` only: ``(value, whole source dict) -> {our option: value}`` (may be empty: nothing to set).
        neutral: ``refused`` only: ``(value, whole source dict) -> True`` where dropping it changes nothing.
    """

    source: str
    kind: Kind
    note: str
    apply: Callable[[Any, Mapping[str, Any]], dict[str, Any]] | None = None
    neutral: Callable[[Any, Mapping[str, Any]], bool] | None = None


def _to(name: str, translate: Callable[[Any], Any] = lambda v: v) -> Callable[[Any, Mapping[str, Any]], dict[str, Any]]:
    return lambda value, _src: {name: translate(value)}


def _same(name: str) -> Callable[[Any, Mapping[str, Any]], dict[str, Any]]:
    """A TRL option of our name: the same value; null leaves our default."""
    return lambda value, _src: {} if value is None else {name: value}


def _refuse(source: str, note: str, *neutral_values: Any) -> Rule:
    return Rule(source, "refused", note, neutral=lambda v, _src: v in neutral_values)


def _scale_rewards(value: Any) -> str:
    """TRL's ``scale_rewards``: ``group``/``batch``/``none``, or its older boolean (true: ``group``)."""
    if isinstance(value, bool):
        return "group" if value else "none"
    return str(value)


def _trl_prompts(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    """TRL counts completions (``generation_batch_size``, else ``per_device_train_batch_size`` x
    ``steps_per_generation``, on one process); we count prompts per step."""
    completions = src.get("generation_batch_size") or value * (src.get("steps_per_generation") or 1)
    generations = int(src.get("num_generations") or 8)
    if completions % generations:
        raise ConfigError(
            f"generation_batch_size {completions} is not a multiple of num_generations {generations}: "
            "set prompt_batch_size (prompts per step) yourself"
        )
    return {"prompt_batch_size": completions // generations}


#: TRL 1.16 ``GRPOConfig`` options whose name or meaning differs from ours. Every other TRL option that has our
#: name maps unchanged; the rest of ``TrainingArguments`` is ignored (:data:`TRL_IGNORED_NOTE`).
TRL_RULES: tuple[Rule, ...] = (
    Rule(
        "per_device_train_batch_size",
        "mapped",
        "prompt_batch_size = completions per step / num_generations (one process)",
        _trl_prompts,
    ),
    Rule(
        "generation_batch_size",
        "mapped",
        "read with per_device_train_batch_size: completions per step",
        lambda v, s: {},
    ),
    Rule(
        "scale_rewards",
        "mapped",
        "the same; TRL's boolean form becomes group (true) or none (false)",
        _to("scale_rewards", _scale_rewards),
    ),
    Rule(
        "max_steps",
        "mapped",
        "the same; TRL's -1 (train by epochs) is refused: set max_steps",
        lambda v, s: (
            {"max_steps": v}
            if v > 0
            else _raise(
                "max_steps",
                v,
                "set max_steps: training is counted in steps here (each takes prompt_batch_size prompts)",
            )
        ),
    ),
    Rule(
        "max_prompt_length", "mapped", "the same (TRL 1.16 dropped it; older configs have it)", _to("max_prompt_length")
    ),
    Rule(
        "steps_per_generation",
        "refused",
        "one optimizer step per generated batch here (TRL's default: steps_per_generation = "
        "gradient_accumulation_steps); reuse samples with num_iterations",
        neutral=lambda v, s: v is None or v == (s.get("gradient_accumulation_steps") or 1),
    ),
    Rule(
        "num_train_epochs",
        "refused",
        "training length is max_steps (TRL's max_steps -1 is refused)",
        neutral=lambda v, s: True,
    ),
    _refuse("warmup_ratio", "use warmup_steps", None, 0.0),
    _refuse("reward_weights", "weights go in reward_components, e.g. {accuracy: 1.0, format: 0.5}", None),
    _refuse("repetition_penalty", "sampling is kept plain so the loss's log-probs match the sampler", 1.0),
    _refuse("min_p", "use top_p or top_k", None, 0.0),
    _refuse("vllm_importance_sampling_clip_min", "only an upper bound exists: vllm_importance_sampling_cap", None),
    Rule(
        "vllm_mode",
        "refused",
        "colocate only: vllm_mode 'server' needs NCCL on GPUs",
        neutral=lambda v, s: v == "colocate" or not s.get("use_vllm"),
    ),
    _refuse(
        "entropy_coef",
        "use entropy_coeff (verl's bonus, aggregated as loss_type; TRL's is a plain token mean whatever loss_type)",
        None,
        0.0,
    ),
    _refuse(
        "use_adaptive_entropy",
        "no adaptive entropy control (Skywork-OR1, arXiv 2505.22312); the nearest is a fixed entropy_coeff",
        None,
        False,
    ),
    _refuse("fsdp", "TRL's FSDP option string is not read: set fsdp: true", None, "", False, []),
    _refuse("fp16", "bf16 autocast on CUDA (bf16); fp16 is not supported", False),
)

TRL_IGNORED_NOTE = "every other TrainingArguments option (logging, saving strategy, hub, hardware, data loading)"


def _raise(name: str, value: Any, why: str) -> dict[str, Any]:
    raise ConfigError(f"{name}={value!r}: {why}")


_ESTIMATORS = {
    "grpo": "outcome",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_plus_plus",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
}
_AGG = {
    "token-mean": "dapo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum-norm": "dr_grpo",
    "seq-mean-token-sum": "luspo",
}
_LOSS_MODES = {
    "vanilla": {},
    "gspo": {"importance_sampling_level": "sequence_token"},
    "kl_cov": {"loss_type": "kl_cov"},  # aggregated as token-mean (dapo), verl's default
    "clip_cov": {"loss_type": "clip_cov"},
}


def _pick(table: Mapping[str, Any], name: str, option: str) -> Callable[[Any, Mapping[str, Any]], dict[str, Any]]:
    def apply(value: Any, _src: Mapping[str, Any]) -> dict[str, Any]:
        if value not in table:
            raise ConfigError(f"{option}={value!r} has no counterpart here; the ones that do: {sorted(table)}")
        out = table[value]
        return dict(out) if isinstance(out, dict) else {name: out}

    return apply


def _verl_estimator(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(_ESTIMATORS, "advantage_estimator", "algorithm.adv_estimator")(value, src)
    if value == "grpo" and src.get("algorithm.norm_adv_by_std_in_grpo") is False:
        out["scale_rewards"] = "none"  # Dr. GRPO's advantage
    return out


def _verl_loss_mode(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(_LOSS_MODES, "", "policy_loss.loss_mode")(value, src)
    agg = src.get("actor_rollout_ref.actor.loss_agg_mode", "token-mean")
    if "loss_type" in out and agg != "token-mean":
        raise ConfigError(f"policy_loss.loss_mode={value!r} aggregates as token-mean here, not {agg!r}")
    return out


def _verl_beta(value: Any, src: Mapping[str, Any]) -> dict[str, Any]:
    kind = src.get("actor_rollout_ref.actor.kl_loss_type", "low_var_kl")
    if value and kind not in ("low_var_kl", "k3"):
        raise ConfigError(f"actor_rollout_ref.actor.kl_loss_type={kind!r}: only k3 (low_var_kl) is built")
    return {"beta": float(src.get("actor_rollout_ref.actor.kl_loss_coef", 0.001)) if value else 0.0}


A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."

#: verl ``ppo_trainer.yaml`` paths that matter to the training math; every other path is ignored.
VERL_RULES: tuple[Rule, ...] = (
    Rule(
        "algorithm.adv_estimator",
        "mapped",
        "advantage_estimator: grpo -> outcome; rloo, reinforce_plus_plus, "
        "reinforce_plus_plus_baseline the same; gae and the rest refused (no value model)",
        _verl_estimator,
    ),
    Rule(
        "algorithm.norm_adv_by_std_in_grpo",
        "mapped",
        "false: scale_rewards none (read with adv_estimator)",
        lambda v, s: {},
    ),
    _refuse("algorithm.use_kl_in_reward", "the KL is a loss term here: set beta (actor.use_kl_loss)", False),
    Rule(
        A + "loss_agg_mode",
        "mapped",
        "loss_type: token-mean -> dapo, seq-mean-token-mean -> grpo, "
        "seq-mean-token-sum-norm -> dr_grpo, seq-mean-token-sum -> luspo",
        _pick(_AGG, "loss_type", "loss_agg_mode"),
    ),
    Rule(
        A + "policy_loss.loss_mode",
        "mapped",
        "vanilla -> the clipped surrogate; gspo -> importance_sampling_level "
        "sequence_token; kl_cov and clip_cov the same (with loss_agg_mode token-mean); others refused (verl's "
        "cispo clips the weight on both sides: another weight than TRL's)",
        _verl_loss_mode,
    ),
    *(
        Rule(A + f"policy_loss.{name}", "mapped", name, _to(name, float))
        for name in ("kl_cov_ratio", "ppo_kl_coef", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
    ),
    Rule(
        A + "clip_ratio",
        "mapped",
        "epsilon (where clip_ratio_low is not set)",
        lambda v, s: {} if s.get(A + "clip_ratio_low") is not None else {"epsilon": v},
    ),
    Rule(A + "clip_ratio_low", "mapped", "epsilon", lambda v, s: {} if v is None else {"epsilon": v}),
    Rule(A + "clip_ratio_high", "mapped", "epsilon_high", lambda v, s: {} if v is None else {"epsilon_high": v}),
    Rule(
        A + "clip_ratio_c",
        "mapped",
        "delta (dual-clip PPO's bound for negative advantages; verl's default 3.0 is on)",
        _to("delta", float),
    ),
    Rule(A + "use_kl_loss", "mapped", "beta = kl_loss_coef when true, else 0", _verl_beta),
    Rule(A + "kl_loss_coef", "mapped", "read with use_kl_loss", lambda v, s: {}),
    Rule(A + "kl_loss_type", "mapped", "low_var_kl and k3 are our k3 KL; others refused", lambda v, s: {}),
    Rule(
        A + "entropy_coeff",
        "mapped",
        "entropy_coeff (the same bonus, aggregated as the loss)",
        _to("entropy_coeff", float),
    ),
    Rule(A + "ppo_epochs", "mapped", "num_iterations", _to("num_iterations")),
    Rule(A + "optim.lr", "mapped", "learning_rate", _to("learning_rate", float)),
    Rule(A + "optim.weight_decay", "mapped", "weight_decay", _to("weight_decay", float)),
    Rule(
        A + "optim.lr_warmup_steps",
        "mapped",
        "warmup_steps (verl's -1: none)",
        lambda v, s: {"warmup_steps": max(int(v), 0)},
    ),
    Rule(A + "grad_clip", "mapped", "max_grad_norm", _to("max_grad_norm", float)),
    Rule(R + "n", "mapped", "num_generations", _to("num_generations")),
    Rule(R + "temperature", "mapped", "temperature", _to("temperature", float)),
    Rule(R + "top_p", "mapped", "top_p", _to("top_p", float)),
    Rule(R + "top_k", "mapped", "top_k (verl's -1: off, our 0)", lambda v, s: {"top_k": max(int(v), 0)}),
    Rule("data.train_batch_size", "mapped", "prompt_batch_size (prompts per step)", _to("prompt_batch_size")),
    Rule("data.max_prompt_length", "mapped", "max_prompt_length", _to("max_prompt_length")),
    Rule("data.max_response_length", "mapped", "max_completion_length", _to("max_completion_length")),
    Rule(
        "data.train_files",
        "mapped",
        "train_data (one file)",
        lambda v, s: {"train_data": v[0] if isinstance(v, list | tuple) else v},
    ),
    Rule("actor_rollout_ref.model.path", "mapped", "model_name_or_path", _to("model_name_or_path")),
    Rule("trainer.total_training_steps", "mapped", "max_steps", lambda v, s: {} if v is None else {"max_steps": v}),
)


@dataclass
class Conversion:
    """The result of :func:`convert`: our options, and what became of each source option."""

    options: dict[str, Any]
    report: dict[str, list[str]] = dataclasses.field(
        default_factory=lambda: {"mapped": [], "refused": [], "ignored": []}
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


def convert(source: Mapping[str, Any], kind: Literal["trl", "verl"]) -> Conversion:
    """Our options from a TRL ``GRPOConfig`` dict (``to_dict()``) or a verl config (nested, as in its YAML).

    Raises:
        ConfigError: a refused option with a value that is not neutral, or a value with no counterpart (an
            ``adv_estimator`` without one, TRL's ``max_steps: -1``), each naming what to set instead.
    """
    flat = flatten(source) if kind == "verl" else dict(source)
    rules = {r.source: r for r in (TRL_RULES if kind == "trl" else VERL_RULES)}
    ours = {f.name for f in dataclasses.fields(GRPOConfig)}
    out = Conversion(options={})
    errors = []
    # the rules' own order, so that a later rule can refine an earlier one (loss_mode's loss_type after the
    # aggregation's), then the options no rule names
    order = [r for r in rules if r in flat] + [k for k in flat if k not in rules]
    for key in order:
        value, rule = flat[key], rules.get(key)
        if rule is None and kind == "trl" and key in ours:
            rule = Rule(key, "mapped", "the same", _same(key))
        if rule is None:
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
                out.options.update({k: v for k, v in rule.apply(value, flat).items() if k})
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            out.report["mapped"].append(key)
    if errors:
        raise ConfigError(f"{kind} config: options with no counterpart here:\n  " + "\n  ".join(errors))
    return out


def rules_table() -> str:
    """The Markdown table of both rule sets (``docs/trainer/from_trl_verl.md`` is generated from it)."""
    lines = ["| from | option | becomes | how |", "| --- | --- | --- | --- |"]
    for name, rules in (("TRL", TRL_RULES), ("verl", VERL_RULES)):
        for r in rules:
            lines.append(f"| {name} | `{r.source}` | {r.kind} | {r.note.replace('|', '/')} |")
    lines.append(
        "| TRL | any other option with one of our names | mapped | the same name, the same value (null: our default) |"
    )
    lines.append(f"| TRL | the rest | ignored | {TRL_IGNORED_NOTE} |")
    lines.append("| verl | every other path | ignored | placement, parallelism, logging, checkpoints |")
    return "\n".join(lines)
