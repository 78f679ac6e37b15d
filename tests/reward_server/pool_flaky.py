"""A handler module whose workers die while starting whenever a marker file exists (health tests)."""

from __future__ import annotations

import os


def init_worker(marker: str) -> None:
    if os.path.exists(marker):
        os._exit(7)


def handle(payload: dict) -> dict:
    return {"pid": os.getpid()}
