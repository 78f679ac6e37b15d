"""A handler module whose workers die while starting (for the pool's start-up failure test)."""

from __future__ import annotations

import os


def init_worker() -> None:
    os._exit(7)


def handle(payload: dict) -> dict:  # pragma: no cover - never reached
    return payload
