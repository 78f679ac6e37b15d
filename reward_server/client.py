"""The reward server's client, re-exported from the light ``rlvr_client`` distribution (``clients/``).

Kept so that ``from reward_server.client import RewardClient, reward_function`` goes on working; new code, and
any trainer's environment, imports :mod:`rlvr_client` (httpx only).
"""

from rlvr_client.client import (
    AsyncRewardClient,
    ComponentResult,
    RetryPolicy,
    RewardClient,
    RewardItem,
    RewardResult,
    RewardServerError,
    StepScore,
    api_key_from_env,
    client_from_env,
    server_urls_from_env,
)
from rlvr_client.trl import component_score, reward_function, reward_functions

__all__ = [
    "AsyncRewardClient",
    "ComponentResult",
    "RetryPolicy",
    "RewardClient",
    "RewardItem",
    "RewardResult",
    "RewardServerError",
    "StepScore",
    "api_key_from_env",
    "client_from_env",
    "component_score",
    "reward_function",
    "reward_functions",
    "server_urls_from_env",
]
