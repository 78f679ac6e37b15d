"""Loading a config: YAML (a repeated key is an error), ``--set key=value`` overrides, unknown names with the
closest known one (a TRL or verl name: ours, or what to use instead), and the field help that
``python -m trainer fields`` prints."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

from trainer.config.checks import ConfigError, _coerce
from trainer.config.commands import GRPOConfig, SampleConfig, SFTConfig
from trainer.config.conversion import foreign_hint

#: Names other trainers use for our knobs, so a ported config gets a useful "did you mean" (TRL's and verl's are
#: answered from the rules of :mod:`trainer.config.foreign`, naming their source).
_ALIASES = {
    "lr": "learning_rate",
    "kl_coef": "beta",
    "init_kl_coef": "beta",
    "cliprange": "epsilon",
    "group_size": "num_generations",
    "num_return_sequences": "num_generations",
    "batch_size": "prompt_batch_size",
    "max_new_tokens": "max_completion_length",
    "max_length": "max_completion_length",
    "model": "model_name_or_path",
    "dataset": "train_data",
    "epsilon_low": "epsilon",
    "clip_range": "epsilon",
    "kl_beta": "beta",
    "max_new_tokens_eval": "max_completion_length",
    "eval_dataset": "eval_data",
    "train_dataset": "train_data",
    "lr_scheduler": "lr_scheduler_type",
    "warmup": "warmup_steps",
    "clip_grad_norm": "max_grad_norm",
    "vllm_gpu_memory_utilisation": "vllm_gpu_memory_utilization",
    "lora_rank": "lora_r",
    "peft": "use_peft",
    "target_modules": "lora_target_modules",
    "max_tool_calls": "max_tool_calling_iterations",
    "tool_call_parser": "tool_call_format",
}

#: Options of other trainers with no counterpart here, and what to do instead (TRL's and verl's own names are
#: answered from the rules of :mod:`trainer.config.foreign`). Without this a close spelling could be suggested for an
#: option that means something else.
_UNSUPPORTED = {
    "max_prompt_length_eval": "max_prompt_length applies to evaluation too",
    "reward_funcs": "rewards come from the reward server: set reward_components or reward_preset",
}


C = typing.TypeVar("C", GRPOConfig, SFTConfig, SampleConfig)

#: Per config class: other trainers' names for its knobs (for "did you mean") and options it refuses with a hint.
_TABLES: dict[type, tuple[dict[str, str], dict[str, str]]] = {
    GRPOConfig: (_ALIASES, _UNSUPPORTED),
    SFTConfig: (
        {
            "lr": "learning_rate",
            "per_device_train_batch_size": "batch_size",
            "dataset": "train_data",
            "train_dataset": "train_data",
            "eval_dataset": "eval_data",
            "model": "model_name_or_path",
            "max_seq_length": "max_completion_length",
            "max_length": "max_completion_length",
            "lr_scheduler": "lr_scheduler_type",
            "warmup": "warmup_steps",
            "grad_clip": "max_grad_norm",
            "epochs": "num_train_epochs",
        },
        {
            "completion_only_loss": "the loss is always on completion tokens only (TRL's completion_only_loss)",
            "assistant_only_loss": "with chat messages the loss is on the last (assistant) message only",
            "packing": "rows are padded, not packed",
            "dataset_text_field": "give prompt and completion columns, or chat messages",
            "logging_steps": "metrics are logged every step",
            "warmup_ratio": "set warmup_steps",
        },
    ),
    SampleConfig: (
        {
            "model": "model_name_or_path",
            "dataset": "data",
            "train_data": "data",
            "k": "num_generations",
            "n": "num_generations",
            "num_samples": "num_generations",
            "threshold": "reward_threshold",
            "max_new_tokens": "max_completion_length",
            "rollout_chunk_prompts": "chunk_prompts",
        },
        {},
    ),
}
_COMMANDS: dict[type, str] = {GRPOConfig: "train", SFTConfig: "sft", SampleConfig: "sample"}
#: ``python -m trainer fields COMMAND`` prints the options of this class.
CONFIG_CLASSES: dict[str, type] = {name: cls for cls, name in _COMMANDS.items()}


# ---------------------------------------------------------------------------------------------------- loading


def config_from_dict(values: dict[str, Any], *, source: str = "config", cls: type[C] = GRPOConfig) -> C:  # type: ignore[assignment]
    """Build and validate a config (:class:`GRPOConfig` unless ``cls`` names another) from plain values.

    Raises:
        ConfigError: an unknown key (with the closest known name), a missing required key, a wrong type or an
            invalid value.
    """
    for key in values:
        _check_key(key, source, cls)
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    missing = [k for k in required if k not in values]
    if missing:
        docs = field_docs(cls)
        raise ConfigError(f"{source} lacks required option(s) {missing}: {', '.join(docs[k] for k in missing)}")
    return cls(**{k: _coerce(cls, k, v) for k, v in values.items()})


def _check_key(key: Any, source: str, cls: type = GRPOConfig) -> None:
    """Refuse an option name that is not a field of ``cls``, with the closest known name (or what to use instead)."""
    known = {f.name for f in dataclasses.fields(cls)}
    aliases, unsupported = _TABLES.get(cls, ({}, {}))
    if not isinstance(key, str):
        raise ConfigError(f"option names are strings; got {key!r} in {source}")
    if key not in known:
        hint = foreign_hint(key) if cls is GRPOConfig and key not in aliases else None
        if hint:  # TRL's or verl's name: ours, or why there is none
            raise ConfigError(f"option {key!r} in {source} {hint}.")
        if key in unsupported:
            raise ConfigError(f"option {key!r} in {source} is not supported: {unsupported[key]}.")
        close = [aliases[key]] if key in aliases else difflib.get_close_matches(key, known, n=1)
        command = _COMMANDS.get(cls, "train")
        hint = f" Did you mean {close[0]!r}?" if close else f" Run `python -m trainer fields {command}` for the list."
        raise ConfigError(f"unknown option {key!r} in {source}.{hint}")


def load_config(
    path: str | Path,
    overrides: dict[str, Any] | None = None,
    cls: type[C] = GRPOConfig,  # type: ignore[assignment]
) -> C:
    """Read a YAML config, apply ``overrides`` (e.g. from ``--set key=value``), validate as ``cls``.

    Relative paths in the file stay relative to the current directory, as on the command line.

    Raises:
        ConfigError: the file is a directory, not UTF-8, not valid YAML (or repeats a key), not a mapping, or what
            :func:`config_from_dict` raises.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    for key, value in (overrides or {}).items():  # a name given on the command line is its mistake, not the file's
        _check_key(key, f"--set {key}={value}", cls)
    if path.is_dir():
        raise ConfigError(f"{path} is a directory; give the YAML config file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    values = _parse_yaml(text, str(path)) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path} must hold a YAML mapping of option: value, got {type(values).__name__}")
    values.update(overrides or {})
    return config_from_dict(values, source=str(path), cls=cls)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice is an error (PyYAML keeps the last one silently)."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"option {key!r} is given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def _parse_yaml(text: str, source: str) -> Any:
    """YAML to Python values; a syntax error or a repeated key is a :class:`ConfigError` naming the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {' '.join(str(exc).split())}") from exc


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["max_steps=10", "beta=0.04"]`` to ``{"max_steps": 10, "beta": 0.04}`` (values parsed as YAML).

    Raises:
        ConfigError: a pair without ``=``, or a value that is not valid YAML.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = _parse_yaml(raw, f"--set {pair}")
    return out


def field_docs(cls: type = GRPOConfig) -> dict[str, str]:
    """Each field's one-line docstring (the string under the field), in field order.

    pydantic reads them (``use_attribute_docstrings``), from each option group and from the command's own class;
    where a command redeclares an option (another default), its docstring is the one shown.
    """
    if cls not in _DOCS:
        docs: dict[str, str] = {}
        for klass in cls.__mro__:  # the most derived first: a redeclared option keeps its own docstring
            if dataclasses.is_dataclass(klass):
                for name, schema in TypeAdapter(klass).json_schema(mode="serialization")["properties"].items():
                    if "description" in schema:
                        docs.setdefault(name, schema["description"])
        _DOCS[cls] = {f.name: docs.get(f.name, "") for f in dataclasses.fields(cls)}
    return _DOCS[cls]


_DOCS: dict[type, dict[str, str]] = {}
