"""The wire contract of the reward server, defined once: what a trainer sends, what the server answers, the
status vocabulary, and the translations from and to each framework's own reward protocol.

Standard library only, so that the server (which builds its pydantic schemas over these types), the light client
(:mod:`rlvr_client.client`, which sends them over HTTP) and the trainer all import one definition.

* :mod:`~rlvr_client.protocol.items`: :class:`RewardItem`, one completion to score.
* :mod:`~rlvr_client.protocol.results`: :class:`RewardResult`, :class:`ComponentResult`, :class:`StepScore`, read
  from the server's JSON with the contract checked (:class:`RewardServerError` otherwise).
* :mod:`~rlvr_client.protocol.status`: :data:`Status`, every status word and what it means.
* :mod:`~rlvr_client.protocol.openrlhf`, :mod:`~rlvr_client.protocol.slime`, :mod:`~rlvr_client.protocol.verl`,
  :mod:`~rlvr_client.protocol.trl`: each framework's request as items, and results as its answer. The server's
  ``/v1/openrlhf`` and ``/v1/slime`` routes and the client's adapters (:mod:`rlvr_client.openrlhf` ...) share them.
"""

from rlvr_client.protocol.items import ComponentSpec, RewardItem
from rlvr_client.protocol.results import ComponentResult, RewardResult, RewardServerError, StepScore
from rlvr_client.protocol.status import STATUS_MEANINGS, STATUSES, Status, describe_statuses

__all__ = [
    "STATUSES",
    "STATUS_MEANINGS",
    "ComponentResult",
    "ComponentSpec",
    "RewardItem",
    "RewardResult",
    "RewardServerError",
    "Status",
    "StepScore",
    "describe_statuses",
]
