"""A config from TRL or verl, carried over: ONE table of rules (:data:`RULES`), read by ``python -m trainer
convert``, by the config loader (a TRL or verl name in our YAML gets a fix-it naming our option) and rendered into
``docs/trainer/from_trl_verl.md`` (``docs/hooks/reference.py``), so the docs and the code cannot drift. The
machinery that applies them is :mod:`trainer.config.conversion`.

Each rule names a source option (TRL 1.16 ``GRPOConfig``: its name; verl: its dotted path in ``ppo_trainer.yaml``,
``algorithm.adv_estimator``, ``actor_rollout_ref.actor.loss_agg_mode``) and says what becomes of it:

* **mapped**: it sets one of our options, with its value translated where the two spell it differently;
* **refused**: we have no counterpart. A refused option whose value is *neutral* (its default, or a value that
  changes nothing) is reported and dropped; any other value is an error naming our nearest option, since
  dropping it would silently train something else;
* **ignored**: it changes no training math (logging, the hub, hardware placement, parallelism).

Where the source's default differs from ours and the source does not set the option (a hand-written TRL dict, a
verl override file), the source's default is used and the report says so (:data:`SOURCE_DEFAULTS`): a TRL user
who leaves ``use_bias_correction_kl`` out gets TRL's ``true``, not our ``false``.
"""

from __future__ import annotations

from typing import Any

from trainer.config.commands import GRPOConfig
from trainer.config.foreign.rule import ORIGIN_NAMES, Origin, Rule, same_name
from trainer.config.foreign.trl import TRL
from trainer.config.foreign.verl import VERL, VERL_ACTOR, VERL_ROLLOUT

__all__ = [
    "IGNORED_NOTES",
    "ORIGIN_NAMES",
    "RULES",
    "SOURCE_DEFAULTS",
    "TRL_RULES",
    "UNSET_NOTES",
    "VERL_ACTOR",
    "VERL_RULES",
    "Origin",
    "Rule",
    "same_name",
]

#: The one table: every TRL and verl option with a rule. Every other TRL option (``TrainingArguments``' logging,
#: hub, hardware, data loading) and every other verl path (placement, parallelism, checkpoints) is ignored.
RULES: tuple[Rule, ...] = TRL + VERL
TRL_RULES = tuple(r for r in RULES if r.origin == "trl")
VERL_RULES = tuple(r for r in RULES if r.origin == "verl")
IGNORED_NOTES = {
    "trl": "every other TrainingArguments option (logging, saving, hub, hardware, data loading)",
    "verl": "every other path (placement, parallelism, the critic, logging, checkpoints)",
}

#: The source's defaults where they differ from ours, used when the source does not set the option (TRL 1.16's
#: ``GRPOConfig``, verl's ``ppo_trainer.yaml``; ``tests/integrations/test_foreign_configs.py`` reads both packages).
SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "trl": {
        "per_device_train_batch_size": 8,  # 8 completions a step: one prompt of 8 (ours: 8 prompts)
        "use_bias_correction_kl": True,
        "gradient_checkpointing": True,
        "disable_dropout": False,
        "vllm_importance_sampling_mode": "sequence_mask",
        "save_steps": 500,
    },
    "verl": {
        VERL_ACTOR + "clip_ratio_c": 3.0,  # dual clip on
        VERL_ACTOR + "optim.weight_decay": 0.01,
        VERL_ACTOR + "optim.lr_scheduler_type": "constant",
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    },
}
#: Options a source must set where its default has no counterpart here: what is kept instead.
UNSET_NOTES: dict[str, dict[str, str]] = {
    "trl": {"max_steps": f"TRL's default -1 trains by epochs: our max_steps {GRPOConfig.max_steps} is kept"},
    "verl": {
        "trainer.total_training_steps": f"verl's default trains total_epochs: our max_steps "
        f"{GRPOConfig.max_steps} is kept",
        "data.train_batch_size": "verl's default 1024 prompts (in optimizer steps of ppo_mini_batch_size 256) "
        f"has no counterpart: our prompt_batch_size {GRPOConfig.prompt_batch_size} is kept",
        VERL_ROLLOUT
        + "n": f"verl's default 1 makes no group: our num_generations {GRPOConfig.num_generations} is kept",
    },
}
