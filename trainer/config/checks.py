"""What the configs check: types, ranges and the rules that several configs share, each error a fix-it message.

Every check raises :class:`ConfigError` with the option, the rule and a value that works (``_fix``), in TRL's
style: ``learning_rate=2.0: must be in (0, 1). Typical GRPO values are 1e-6 to 1e-5.``
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import types
import typing
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import TypeAdapter, ValidationError

from trainer.optim import LR_SCHEDULERS


class ConfigError(ValueError):
    """A config value is missing, unknown or out of range; the message says how to fix it."""


def _fix(name: str, value: Any, rule: str, hint: str) -> ConfigError:
    return ConfigError(f"{name}={value!r}: {rule}. {hint}")


def names_a_local_path(name: str) -> bool:
    """Whether a ``*_name_or_path`` / ``*_data`` value can only be a local path, never a hub id (``org/name``):
    it exists, starts with ``.``, ``/`` or ``~``, or has more than one ``/``."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


# ------------------------------------------------------------------------ checks shared by the configs


def _check_positive(c: Any, *names: str) -> None:
    for name in names:
        if getattr(c, name) < 1:
            raise _fix(name, getattr(c, name), "must be >= 1", f"Set {name}: 1 or more.")


def _check_non_negative(c: Any, *names: str) -> None:
    for name in names:
        if getattr(c, name) < 0:
            raise _fix(name, getattr(c, name), "must be >= 0", "Use 0 to turn it off.")


def _check_sampling(c: Any, *, training: bool) -> None:
    """``temperature``, ``top_p``, ``top_k`` and ``max_prompt_length`` of a config that samples."""
    if c.max_prompt_length is not None and c.max_prompt_length < 1:
        raise _fix("max_prompt_length", c.max_prompt_length, "must be >= 1 or null", "Use null to keep whole prompts.")
    if training and c.temperature <= 0:
        raise _fix(
            "temperature", c.temperature, "must be > 0 for training (GRPO needs sampled, diverse groups)", "Use 1.0."
        )
    if c.temperature < 0:
        raise _fix("temperature", c.temperature, "must be >= 0", "Use 0 for greedy decoding, 1.0 to sample.")
    if not 0 < c.top_p <= 1:
        raise _fix("top_p", c.top_p, "must be in (0, 1]", "Use 1.0 to keep every token.")
    if c.top_k < 0:
        raise _fix("top_k", c.top_k, "must be >= 0", "Use 0 to keep every token.")
    if c.cache_implementation not in ("dynamic", "static"):
        raise _fix("cache_implementation", c.cache_implementation, "must be 'dynamic' or 'static'", "Use 'dynamic'.")


def _check_optimizer(c: Any) -> None:
    """The AdamW and schedule fields that ``GRPOConfig`` and ``SFTConfig`` share."""
    if not 0 < c.learning_rate < 1:
        raise _fix("learning_rate", c.learning_rate, "must be in (0, 1)", "Typical GRPO values are 1e-6 to 1e-5.")
    for name in ("weight_decay", "max_grad_norm"):
        if getattr(c, name) < 0:
            raise _fix(name, getattr(c, name), "must be >= 0", f"Set {name}: 0 to turn it off.")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(c, name) < 1:
            raise _fix(name, getattr(c, name), "must be in [0, 1)", "The usual values are 0.9 and 0.999.")
    if c.adam_epsilon <= 0:
        raise _fix("adam_epsilon", c.adam_epsilon, "must be > 0", "Keep the default.")
    _check_non_negative(c, "warmup_steps")
    if c.lr_scheduler_type not in LR_SCHEDULERS:
        raise _fix("lr_scheduler_type", c.lr_scheduler_type, f"must be one of {LR_SCHEDULERS}", "Use 'linear'.")


def _check_reward_client(c: Any) -> None:
    """The reward-server fields that ``GRPOConfig`` and ``SampleConfig`` share."""
    if c.reward_wait_ready_s < 0:
        raise _fix("reward_wait_ready_s", c.reward_wait_ready_s, "must be >= 0", "Set reward_wait_ready_s: 0.")
    if c.reward_timeout_s <= 0:
        raise _fix("reward_timeout_s", c.reward_timeout_s, "must be > 0", "Keep the default.")
    if not c.reward_retry_deadline_s >= 0:
        raise _fix("reward_retry_deadline_s", c.reward_retry_deadline_s, "must be >= 0", "Keep the default (300).")
    if c.reward_max_retries is not None:
        _check_non_negative(c, "reward_max_retries")
    _check_components(c.reward_components)
    if not c.reward_server_urls:
        raise _fix(
            "reward_server_urls",
            c.reward_server_urls,
            "needs at least one URL",
            "Start a server: python -m reward_server.",
        )
    for url in c.reward_server_urls:
        _check_url(url)


def _check_run(c: Any) -> None:
    """Seed, checkpoints and hardware fields; each config checks the ones it has."""
    if not 0 <= c.seed < 2**32:
        raise _fix("seed", c.seed, "must be in [0, 2**32)", "NumPy seeds only take that range; use e.g. 42.")
    if c.device not in ("auto", "cpu", "cuda"):
        raise _fix("device", c.device, "must be auto, cpu or cuda", "Use auto.")
    if getattr(c, "save_total_limit", None) is not None and c.save_total_limit < 1:
        raise _fix("save_total_limit", c.save_total_limit, "must be >= 1 or null", "Use null to keep every checkpoint.")
    if c.torch_num_threads is not None and c.torch_num_threads < 1:
        raise _fix("torch_num_threads", c.torch_num_threads, "must be >= 1 or null", "Use null for torch's default.")


def _check_url(url: str, name: str = "reward_server_urls") -> None:
    """A base URL the client can append ``/v1/rewards`` (or ``/v1/tools/python``) to; ``name`` is the option."""
    example = "Write each as a base URL, e.g. http://127.0.0.1:8000 (a YAML list for several)."
    if not url.startswith(("http://", "https://")):
        raise _fix(name, url, "must be an http(s) URL", example)
    parts = urlsplit(url)
    if not parts.hostname or any(ch.isspace() or ch == "," for ch in url):
        raise _fix(name, url, "is not one URL with a host", example)
    try:
        parts.port  # noqa: B018  # raises on a port that is not a number in range
    except ValueError as exc:
        raise _fix(name, url, f"has a bad port ({exc})", example) from exc
    if parts.path.rstrip("/").endswith(("/v1/rewards", "/v1")):
        raise _fix(name, url, "must be the server's base URL: the client adds /v1/rewards", example)


def _check_components(components: dict[str, Any] | None) -> None:
    """``reward_components`` maps a component name to a weight or to ``{weight: w, ...params}``, as the server takes
    it; checked here so a typo fails at load, not after the first batch was generated."""
    if components is None:
        return
    for name, spec in components.items():
        weight = spec.get("weight", 1.0) if isinstance(spec, dict) else spec
        if not isinstance(name, str) or not (
            isinstance(weight, int | float) and not isinstance(weight, bool) and math.isfinite(weight)
        ):
            raise _fix(
                "reward_components",
                {name: spec},
                "maps a component name to a number or to {weight: number, ...params}",
                "e.g. {accuracy: 1.0, format: {weight: 0.5, think_prefilled: true}}.",
            )


# ---------------------------------------------------------------------------------------------------- type checks


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if typing.get_origin(tp) is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _matches(value: Any, tp: Any) -> bool:
    """Whether ``value`` is a ``tp``, as pydantic's strict mode judges it: no bool or string for a number, no
    number for a bool, a tuple (the YAML list, see :func:`_coerce`) of the right items. A mapping is only checked
    to be one: what its keys and values must be, the range checks say with a hint."""
    try:
        _adapter(tp).validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


@functools.cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(_any_mapping(tp))


def _any_mapping(tp: Any) -> Any:
    """``tp`` with every ``dict[K, V]`` in it as a plain ``dict``."""
    if typing.get_origin(tp) is dict:
        return dict
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, [_any_mapping(a) for a in typing.get_args(tp)])
    return tp


#: String options where whitespace is a value (a blank line separates steps).
_WHITESPACE_OK = frozenset({"step_separator"})


def _check_types(c: Any) -> None:
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        tp = _hints(type(c))[f.name]
        if typing.get_origin(tp) is Literal:
            continue  # _validate names the allowed values with a hint
        if not _matches(value, tp):
            if isinstance(value, tuple):  # a list whose items have the wrong type: name the item
                bad = next(v for v in value if not _matches(v, typing.get_args(tp)[0]))
                raise ConfigError(f"{f.name}: {bad!r} has type {type(bad).__name__}; expected {_describe(tp)}.")
            raise ConfigError(f"{f.name}={value!r} has type {type(value).__name__}; expected {_describe(tp)}.")
        # NaN passes every `< 0` check and inf every upper bound, so they are refused before the range checks.
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{f.name}={value!r}: must be a finite number. Give a number such as the default.")
        # An empty string is falsy: `resume_from_checkpoint: ""` would silently start afresh, `eval_data: ""`
        # would silently skip evaluation.
        if isinstance(value, str) and not (value if f.name in _WHITESPACE_OK else value.strip()):
            hint = "use null to leave it unset" if _matches(None, tp) else "give a value"
            raise ConfigError(f"{f.name}={value!r}: must not be empty; {hint}.")


def _coerce(cls: type, name: str, value: Any) -> Any:
    """YAML-level conveniences: ``1e-5`` (PyYAML reads it as a string) to float, lists to tuples."""
    tp = _hints(cls)[name]
    accepts_float = tp is float or (typing.get_origin(tp) in (types.UnionType,) and float in typing.get_args(tp))
    if accepts_float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if accepts_float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    is_tuple = typing.get_origin(tp) is tuple or any(typing.get_origin(a) is tuple for a in typing.get_args(tp))
    if isinstance(value, list) and is_tuple:
        return tuple(value)
    if name in ("reward_server_urls", "lora_target_modules") and isinstance(value, str):
        return (value,)
    return value
