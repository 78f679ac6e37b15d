"""GRPO's algorithms as registries: advantage estimators and policy losses, looked up by name from the config."""

# The entries that live beside the loss rather than in it register themselves on import.
from trainer.algorithms import covariance as _covariance  # noqa: F401
