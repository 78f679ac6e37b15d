"""A name-to-entry registry, as verl keeps its advantage estimators and policy losses (``register_adv_est``,
``register_policy_loss`` in ``verl/trainer/ppo/core_algos.py``).

The config names an entry (``advantage_estimator: outcome``, ``loss_type: dapo``); the loop looks it up and never
names one itself, so a new estimator or loss is one decorated function, with no edit to the loop or the config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name, in the order they were registered.

    Args:
        option: the config option that names an entry (``advantage_estimator``); errors say it.
    """

    def __init__(self, option: str) -> None:
        self.option = option
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers its argument as ``name`` and returns it unchanged.

        Raises:
            ValueError: ``name`` is already registered (two entries under one name would silently shadow).
        """

        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.option} {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return add

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's own entry, once the test is done); an unknown name is left alone."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry registered as ``name``.

        Raises:
            ValueError: no such entry; the message lists the choices.
        """
        if name not in self:
            raise ValueError(f"{self.option} must be one of {self.choices()}, got {name!r}")
        return self._entries[name]

    def choices(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.option!r}, {self.choices()})"
