"""The trainer's configs: frozen dataclasses, loaded from YAML and validated before anything starts.

:class:`GRPOConfig` is ``python -m trainer train``'s, :class:`SFTConfig` ``sft``'s and :class:`SampleConfig`
``sample``'s. Each is composed of option groups (:mod:`trainer.config.groups`: model, data, prompts, reward server,
sampling, optimisation, checkpoints, runtime ...), so an option the commands share is defined once, plus the
command's own options (:mod:`trainer.config.commands`). The YAML stays flat, and knob names follow TRL's
``GRPOConfig`` and ``SFTConfig`` where they mean the same thing (``num_generations``, ``beta``, ``epsilon``,
``loss_type``, ``completion_only_loss`` ...), so a TRL recipe carries over. Each field has a one-line docstring
under it (``python -m trainer fields [train|sft|sample]`` prints them). Validation errors say which value is wrong
and how to fix it (:mod:`trainer.config.checks`); :mod:`trainer.config.loader` reads the YAML and the overrides.
"""

from trainer.config.checks import ConfigError, names_a_local_path
from trainer.config.commands import GRPOConfig, SampleConfig, SFTConfig
from trainer.config.loader import CONFIG_CLASSES, config_from_dict, field_docs, load_config, parse_overrides

__all__ = [
    "CONFIG_CLASSES",
    "ConfigError",
    "GRPOConfig",
    "SFTConfig",
    "SampleConfig",
    "config_from_dict",
    "field_docs",
    "load_config",
    "names_a_local_path",
    "parse_overrides",
]
