"""A stand-in for the model worker's handler (``verifiers/reward_model:score_payload``), for the batcher tests:
no torch, and each item's response says what to do."""

from __future__ import annotations

import os
import time
from typing import Any


def score_payload(payload: tuple[str, list[tuple[Any, ...]]]) -> list[tuple[str, Any, int]]:
    """Per item ``(prompt, response, scope, step_ends)``: ``"die"`` exits the worker, ``"sleep:S"`` sleeps S
    seconds, ``"bad"`` fails that item alone; any other response scores ``[len(response), batch size]``."""
    _, items = payload
    out: list[tuple[str, Any, int]] = []
    for _, response, _, _ in items:
        if response == "die":
            os._exit(3)
        if response.startswith("sleep:"):
            time.sleep(float(response.split(":")[1]))
        if response == "bad":
            out.append(("error", "cannot encode", 0))
        else:
            out.append(("ok", [float(len(response)), float(len(items))], 0))
    return out
