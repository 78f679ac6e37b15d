"""verl's ``custom_reward_function``: rewards from the reward server (tested with verl 0.9.1).

Three functions, one per way verl calls a reward function; pick one with ``custom_reward_function.name``:

* :func:`compute_score_async` (recommended, verl >= 0.7's reward loop, the default manager ``naive``): the
  coroutine form, which verl awaits once per sample, concurrently; the calls of one reward-loop worker are
  gathered into one request (see :mod:`rlvr_client._batching`).
* :func:`compute_score_batch`: for ``reward_manager=batch`` (verl's ``BatchRewardManager``): the whole batch
  in one request.
* :func:`compute_score`: the per-sample form ``compute_score(data_source, solution_str, ground_truth,
  extra_info)``, for any manager that calls it synchronously; one request per sample over a shared connection pool.

Each reads the server's URL(s) from ``RLVR_SERVER_URL`` (comma-separated) and the key from ``RLVR_API_KEY``, and
takes ``preset``, ``components`` and ``on_null`` from ``custom_reward_function.reward_kwargs``.

**The sample.** ``data_source`` picks the task: ``code`` for the code datasets (:data:`CODE_SOURCES`), else
``math``; ``extra_info["task"]`` overrides it. A math ``ground_truth`` is the reference answer. A code item's tests
come from ``extra_info["tests"]`` (our format), or from ``ground_truth`` as verl's code datasets write it (JSON
``{"inputs": [...], "outputs": [...]}``, with ``fn_name`` for call-based problems). ``extra_info`` may also set
``language``, ``components``, ``preset``, and ``prompt`` (or verl's ``question``) for the language component.

**The result** is a dict: ``score`` (what verl trains on), ``acc`` (the accuracy component, which verl reports
as its validation accuracy), ``rlvr_scored`` (1.0 or 0.0), ``rlvr_status`` and ``rlvr_<component>`` for every
component: verl keeps them as ``reward_extra_info``, dumps them with the generations, and averages the numeric
ones in validation (a ``None`` is left out of the mean). verl needs the same keys in every sample's dict: keep
the components the same across a dataset.

**A completion the server could not score** (a timeout, a sandbox failure, an invalid ground truth) has no
reward, and verl has no "not scoreable": a ``None`` fails the step when verl writes it into the reward tensor,
and a NaN would make its group's GRPO advantages, then the loss, NaN. We give ``score`` = 0.0, verl's own choice
for a sample it cannot score (``NaiveRewardManager`` gives 0.0 to a ``compute_score`` that times out), with
``rlvr_scored`` = 0.0 and the status beside it, and count it in a warning. ``on_null="raise"`` fails the step
instead, for runs where a rare zero is worse than a stop.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr_client._batching import coalescer
from rlvr_client.client import RewardClient, client_from_env
from rlvr_client.protocol import RewardResult
from rlvr_client.protocol.verl import CODE_SOURCES, NULL_SCORE, as_verl, config_from_kwargs, item_for_sample

__all__ = ["CODE_SOURCES", "compute_score", "compute_score_async", "compute_score_batch", "item_for_sample"]

logger = logging.getLogger("rlvr_client.verl")


def _warn_unscored(results: Sequence[RewardResult]) -> None:
    unscored = [r.status for r in results if r.reward is None]
    if unscored:
        logger.warning(
            "%d of %d samples could not be scored (%s); they get score %.1f (see rlvr_scored, rlvr_status)",
            len(unscored),
            len(results),
            ", ".join(sorted(set(unscored))),
            NULL_SCORE,
        )


_sync_client: RewardClient | None = None
_sync_lock = threading.Lock()


def _client() -> RewardClient:
    global _sync_client
    with _sync_lock:
        if _sync_client is None:
            _sync_client = client_from_env()
        return _sync_client


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's per-sample ``compute_score``: one request per call (blocking).

    Keyword args (``reward_kwargs``): ``preset``, ``components`` (a mapping or a JSON string), ``on_null``
    (``zero`` or ``raise``). Other keywords verl passes (``reward_router_address`` ...) are ignored.

    Raises:
        ValueError: a code sample without tests, or an unscored sample with ``on_null="raise"``.
        rlvr_client.client.RewardServerError: the server refused the sample or stayed unreachable.
    """
    preset, components = config_from_kwargs(kwargs)
    item = item_for_sample(data_source, solution_str, ground_truth, extra_info, item_id=uuid.uuid4().hex)
    [result] = _client().score([item], preset=preset, components=components)
    _warn_unscored([result])
    return as_verl(result, kwargs.get("on_null", "zero"))


async def compute_score_async(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """:func:`compute_score` as a coroutine: concurrent calls on one event loop go out as one request."""
    preset, components = config_from_kwargs(kwargs)
    item = item_for_sample(data_source, solution_str, ground_truth, extra_info, item_id=uuid.uuid4().hex)
    result = await coalescer(preset, components).score(item)
    _warn_unscored([result])
    return as_verl(result, kwargs.get("on_null", "zero"))


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None],
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """verl's batched form, for ``reward_manager=batch``: the whole batch in one request (more if it is larger
    than the client's ``max_batch_items``); one dict per sample, in order. Same keywords and errors as
    :func:`compute_score`."""
    preset, components = config_from_kwargs(kwargs)
    batch = uuid.uuid4().hex[:12]
    items = [
        item_for_sample(source, solution, truth, extra, item_id=f"{batch}-{i}")
        for i, (source, solution, truth, extra) in enumerate(
            zip(data_sources, solution_strs, ground_truths, extra_infos, strict=True)
        )
    ]
    results = _client().score(items, preset=preset, components=components)
    _warn_unscored(results)
    return [as_verl(r, kwargs.get("on_null", "zero")) for r in results]
