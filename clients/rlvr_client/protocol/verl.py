"""verl's ``custom_reward_function`` contract, both ways: a sample (``data_source``, ``solution_str``,
``ground_truth``, ``extra_info``) as an item, and a result as the dict verl keeps. Pure: :mod:`rlvr_client.verl`
calls the server with these (its docstring gives the mapping and the policy on a sample that could not be scored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr_client.protocol.items import RewardItem
from rlvr_client.protocol.results import RewardResult

__all__ = ["CODE_SOURCES", "NULL_SCORE", "as_verl", "config_from_kwargs", "item_for_sample", "plain"]

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


def as_verl(result: RewardResult, on_null: str) -> dict[str, Any]:
    """The dict verl keeps for one sample (see :mod:`rlvr_client.verl`): ``score``, ``acc``, ``rlvr_scored``,
    ``rlvr_status`` and ``rlvr_<component>``.

    Raises:
        ValueError: ``on_null`` is neither ``zero`` nor ``raise``, or it is ``raise`` and the sample has no reward.
    """
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


def plain(value: Any) -> Any:
    """``value`` with every mapping a ``dict`` and every list a ``list`` (OmegaConf's containers are neither)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def config_from_kwargs(kwargs: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """``preset`` and ``components`` from a framework's reward kwargs (``components`` may be a JSON string).

    Raises:
        ValueError: ``components`` is neither a mapping nor a JSON object.
    """
    components = kwargs.get("components")
    if isinstance(components, str):
        components = json.loads(components)
    if components is not None and not isinstance(components, Mapping):
        raise ValueError(f"components must map component names to weights, got {components!r}")
    preset = kwargs.get("preset")
    return (None if preset is None else str(preset)), (None if components is None else plain(components))
