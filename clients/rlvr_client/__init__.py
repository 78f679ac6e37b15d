"""rlvr-client: the reward server's HTTP client and its adapters for TRL, verl, OpenRLHF and slime.

Installs with ``httpx`` alone (``pip install ./clients``). The adapters are modules, imported by path from each
framework's config: :mod:`rlvr_client.trl`, :mod:`rlvr_client.verl`, :mod:`rlvr_client.openrlhf`,
:mod:`rlvr_client.slime`. The wire contract, :mod:`rlvr_client.protocol`, is standard library only: the HTTP
client's names below are imported on first use, so that importing the contract does not import ``httpx``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlvr_client.protocol import ComponentResult, RewardItem, RewardResult, RewardServerError, StepScore

if TYPE_CHECKING:
    from rlvr_client.client import (
        AsyncRewardClient,
        RetryPolicy,
        RewardClient,
        api_key_from_env,
        client_from_env,
        server_urls_from_env,
    )
    from rlvr_client.trl import component_score, reward_function, reward_functions

__version__ = "0.1.0"

__all__ = [
    "AsyncRewardClient",
    "ComponentResult",
    "RetryPolicy",
    "RewardClient",
    "RewardItem",
    "RewardResult",
    "RewardServerError",
    "StepScore",
    "__version__",
    "api_key_from_env",
    "client_from_env",
    "component_score",
    "reward_function",
    "reward_functions",
    "server_urls_from_env",
]

_HTTP_NAMES = {
    "AsyncRewardClient": "rlvr_client.client",
    "RetryPolicy": "rlvr_client.client",
    "RewardClient": "rlvr_client.client",
    "api_key_from_env": "rlvr_client.client",
    "client_from_env": "rlvr_client.client",
    "server_urls_from_env": "rlvr_client.client",
    "component_score": "rlvr_client.trl",
    "reward_function": "rlvr_client.trl",
    "reward_functions": "rlvr_client.trl",
}


def __getattr__(name: str) -> Any:
    """The HTTP client's public names, imported when first asked for (PEP 562)."""
    module = _HTTP_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
