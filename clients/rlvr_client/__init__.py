"""rlvr-client: the reward server's HTTP client and its adapters for TRL, verl, OpenRLHF and slime.

Installs with ``httpx`` alone (``pip install ./clients``). The adapters are modules, imported by path from each
framework's config: :mod:`rlvr_client.trl`, :mod:`rlvr_client.verl`, :mod:`rlvr_client.openrlhf`,
:mod:`rlvr_client.slime`.
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
