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

import json
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr_client._batching import coalescer, config_from_kwargs, plain
from rlvr_client.client import RewardClient, RewardItem, RewardResult, client_from_env

__all__ = ["CODE_SOURCES", "compute_score", "compute_score_async", "compute_score_batch", "item_for_sample"]

logger = logging.getLogger("rlvr_client.verl")

#: ``data_source`` names of code datasets: lower case, ``_`` and ``-`` dropped, a prefix before ``/`` ignored
#: (``deepmind/code_contests`` is ``codecontests``).
CODE_SOURCES = frozenset(
    {"codecontests", "apps", "taco", "codeforces", "livecodebench", "primeintellect", "humaneval", "mbpp", "leetcode"}
)
#: The training reward of a sample the server could not score (see the module's docstring).
NULL_SCORE = 0.0
# verl's reward managers pass no truncation to ``compute_score``; a custom manager or dataset hook that knows
# it (``valid_response_length == response_length`` without EOS) can set ``extra_info["truncated"]``.
_EXTRA_KEYS = ("task", "tests", "language", "components", "preset", "num_tokens", "truncated")


def _task(data_source: Any, extra_info: Mapping[str, Any]) -> str:
    if extra_info.get("task") is not None:
        return str(extra_info["task"])
    name = str(data_source or "").lower().rsplit("/", 1)[-1].replace("_", "").replace("-", "")
    return "code" if any(name.startswith(source) for source in CODE_SOURCES) else "math"


def _code_tests(ground_truth: Any) -> Any:
    """verl's code ground truth (``{"inputs", "outputs"[, "fn_name"]}``, as JSON or a dict) as our tests."""
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else plain(ground_truth)
    if not isinstance(truth, dict):
        raise ValueError(f"a code sample's ground_truth must be a JSON object of tests, got {ground_truth!r:.100}")
    if "type" in truth:  # already our format
        return truth
    inputs, outputs = truth.get("inputs"), truth.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("a code sample's ground_truth needs lists 'inputs' and 'outputs' of the same length")
    if truth.get("fn_name"):
        return {
            "type": "call",
            "fn_name": truth["fn_name"],
            "cases": [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)],
        }
    return {"type": "stdio", "cases": [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]}


def item_for_sample(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None, *, item_id: str
) -> RewardItem:
    """The :class:`RewardItem` for one verl sample (see the module's docstring for the mapping).

    Raises:
        ValueError: a code sample without tests.
    """
    extra = plain(extra_info) if isinstance(extra_info, Mapping) else {}
    task = _task(data_source, extra)
    fields = {k: extra[k] for k in _EXTRA_KEYS if extra.get(k) is not None}
    fields["task"] = task
    prompt = extra.get("prompt", extra.get("question"))
    if task == "code":
        if "tests" not in fields:
            fields["tests"] = _code_tests(ground_truth)
        truth = None
    else:
        truth = None if ground_truth is None else str(ground_truth)
    return RewardItem(
        id=item_id,
        response=solution_str,
        ground_truth=truth,
        prompt=prompt if isinstance(prompt, str) else None,
        **fields,
    )


def _as_verl(result: RewardResult, on_null: str) -> dict[str, Any]:
    if result.reward is None and on_null == "raise":
        raise ValueError(f"the reward server could not score a sample (status {result.status!r})")
    if on_null not in ("zero", "raise"):
        raise ValueError(f"on_null must be 'zero' or 'raise', got {on_null!r}")
    accuracy = result.components.get("accuracy")
    out: dict[str, Any] = {
        "score": NULL_SCORE if result.reward is None else result.reward,
        "acc": None if accuracy is None else accuracy.score,
        "rlvr_scored": float(result.reward is not None),
        "rlvr_status": result.status,
    }
    for name, component in sorted(result.components.items()):
        out[f"rlvr_{name}"] = component.score
    return out


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
    return _as_verl(result, kwargs.get("on_null", "zero"))


async def compute_score_async(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """:func:`compute_score` as a coroutine: concurrent calls on one event loop go out as one request."""
    preset, components = config_from_kwargs(kwargs)
    item = item_for_sample(data_source, solution_str, ground_truth, extra_info, item_id=uuid.uuid4().hex)
    result = await coalescer(preset, components).score(item)
    _warn_unscored([result])
    return _as_verl(result, kwargs.get("on_null", "zero"))


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
    return [_as_verl(r, kwargs.get("on_null", "zero")) for r in results]
