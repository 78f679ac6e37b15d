"""slime's reward model: rewards from the reward server (written against slime 0.3.1, ``slime/rollout/rm_hub``).

Two ways to use it:

* **The server's route**, slime's built-in remote RM: ``--rm-type remote_rm --rm-url
  http://HOST:8000/v1/slime?preset=r1_zero --reward-key reward``. slime posts ``{"prompt", "response", "label"}``
  for each sample and keeps the answer, :func:`reply`'s dict, as the sample's reward; ``--reward-key reward``
  picks the number out of it.
* **This module as slime's custom RM**: ``--custom-rm-path rlvr_client.slime.reward`` with ``--group-rm``: each
  group goes to the server in one request, through :class:`~rlvr_client.client.AsyncRewardClient` (retries,
  ``RLVR_SERVER_URL``, ``RLVR_API_KEY``; ``RLVR_PRESET`` / ``RLVR_COMPONENTS`` choose the components). Without
  ``--group-rm`` slime calls it once per sample, and the calls of one event loop are gathered into one request.

Each label is read by :func:`rlvr_client.labels.label_fields`: a ground truth, or JSON with ``tests`` for code.

**A completion the server could not score.** slime has no "not scoreable" reward, but a sample can be left out
of the loss (``Sample.remove_sample``). The custom RM marks such a sample removed and gives it the mean reward of
the scored samples of its group (0.0 if none is scored), so slime's group normalisation sees the same mean as
without it, and its own advantage is zero and masked: what our trainer does with a ``null``. The route cannot
reach the sample: it answers ``reward`` 0.0 with ``scored`` false and the status, which slime keeps in
``sample.reward``.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from rlvr_client._batching import async_client, coalescer
from rlvr_client.protocol.slime import NULL_REWARD, group_rewards, item_for_sample, reply, sample_item

__all__ = ["NULL_REWARD", "item_for_sample", "reply", "reward"]


def _config() -> tuple[str | None, dict[str, Any] | None]:
    raw = os.environ.get("RLVR_COMPONENTS")
    return os.environ.get("RLVR_PRESET") or None, json.loads(raw) if raw else None


async def reward(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """slime's custom RM (``--custom-rm-path rlvr_client.slime.reward``): ``sample`` is one ``Sample``, or a
    group's list of them (``--group-rm``), which goes out as one request. Returns the reward(s); a sample the
    server could not score is marked ``remove_sample`` (see the module's docstring).

    Raises:
        rlvr_client.labels.LabelError: a label cannot be read.
        rlvr_client.client.RewardServerError: the server refused the batch or stayed unreachable.
    """
    preset, components = _config()
    batch = uuid.uuid4().hex[:12]
    if isinstance(sample, list):
        items = [sample_item(s, f"{batch}-{i}") for i, s in enumerate(sample)]
        results = await async_client().score(items, preset=preset, components=components)
        return group_rewards(sample, results)
    result = await coalescer(preset, components).score(sample_item(sample, batch))
    return group_rewards([sample], [result])[0]
