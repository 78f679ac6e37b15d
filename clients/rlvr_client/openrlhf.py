"""OpenRLHF's remote reward protocol: `{"query", "prompts", "labels"}` in, `{"rewards", "scores", "extra_logs"}` out.

Two ways to use it (tested with OpenRLHF 0.11.2, ``openrlhf/utils/agent.py``):

* **The server's route**: ``--reward.remote_url http://HOST:8000/v1/openrlhf?preset=r1_zero`` (several
  comma-separated). OpenRLHF posts the lists there and reads the answer; no code of ours runs in its process.
* **This file as OpenRLHF's reward function**: ``--reward.remote_url /path/to/rlvr_client/openrlhf.py`` loads
  :func:`reward_func`, which calls the server through :class:`~rlvr_client.client.RewardClient` (retries,
  balancing over ``RLVR_SERVER_URL``, ``RLVR_API_KEY``); ``RLVR_PRESET`` / ``RLVR_COMPONENTS`` (JSON) choose the
  components. Use it when the server wants an API key: OpenRLHF's own HTTP client sends no headers.

Each ``query`` is the chat-templated prompt and the completion, decoded with special tokens; the completion is
cut out by :func:`rlvr_client.chat.split_query`. Each label is read by :func:`rlvr_client.labels.label_fields`.

OpenRLHF has no "not scoreable": a ``None`` reward fails the step when it is turned into a tensor. A completion
the server could not score gets :data:`NULL_REWARD` (0.0) in ``rewards`` and ``scores``, and
``extra_logs["rlvr/unscored"]`` = 1, which OpenRLHF logs, so the rate shows beside the reward curve. With
``RLVR_ON_NULL=raise`` the step fails instead.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr_client.client import RewardClient, client_from_env
from rlvr_client.protocol import ComponentSpec
from rlvr_client.protocol.openrlhf import NULL_REWARD, ProtocolError, items_from_request, reply

__all__ = ["NULL_REWARD", "ProtocolError", "items_from_request", "reply", "reward_func"]

ON_NULL_ENV = "RLVR_ON_NULL"
PRESET_ENV = "RLVR_PRESET"
COMPONENTS_ENV = "RLVR_COMPONENTS"


def _config_from_env() -> tuple[str | None, Mapping[str, ComponentSpec] | None, str]:
    preset = os.environ.get(PRESET_ENV) or None
    raw = os.environ.get(COMPONENTS_ENV)
    components = json.loads(raw) if raw else None
    on_null = os.environ.get(ON_NULL_ENV, "zero")
    if on_null not in ("zero", "raise"):
        raise ValueError(f"{ON_NULL_ENV} must be 'zero' or 'raise', got {on_null!r}")
    return preset, components, on_null


_client: RewardClient | None = None
_client_lock = threading.Lock()


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any]) -> dict[str, Any]:
    """OpenRLHF's ``reward_func(queries, prompts, labels)``, for ``--reward.remote_url /path/to/openrlhf.py``.

    OpenRLHF calls it from a thread with the samples of one rollout; the request goes to ``RLVR_SERVER_URL`` over
    one connection pool per process. Returns :func:`reply`'s answer.

    Raises:
        ProtocolError: see :func:`items_from_request`.
        rlvr_client.client.RewardServerError: the server refused the batch or stayed unreachable.
    """
    global _client
    with _client_lock:
        if _client is None:
            _client = client_from_env()
    preset, components, on_null = _config_from_env()
    items = items_from_request(queries, prompts, labels, id_prefix=uuid.uuid4().hex[:12])
    return reply(_client.score(items, preset=preset, components=components), on_null=on_null)
