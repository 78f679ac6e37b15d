"""GRPO's algorithms as registries: advantage estimators and policy losses, looked up by name from the config."""
