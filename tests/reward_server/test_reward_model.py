"""Model-based rewards without a model: the pure arithmetic (normalisation, step probabilities, layout) by hand,
and the dynamic batcher on a stand-in worker (timeouts, dead workers, cancelled callers). The tiny models are in
``test_reward_model_tiny.py``."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from typing import Any

import pytest

from reward_server.engine.pool import WorkerPool
from reward_server.engine.reward_models import ModelCatalog, RewardModels
from reward_server.verifiers import reward_model as rm
from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT

# ------------------------------------------------------------------------------------------ pure arithmetic

SIGMOID_2 = 1 / (1 + math.exp(-2))  # 0.8807970779778823


@pytest.mark.parametrize(
    ("logits", "kwargs", "expected"),
    [
        ([2.0], {}, 2.0),  # none: the logit itself
        ([2.0], {"normalize": "sigmoid"}, SIGMOID_2),
        ([-1000.0], {"normalize": "sigmoid"}, 0.0),  # no overflow
        ([1000.0], {"normalize": "sigmoid"}, 1.0),
        ([1.0, 3.0], {"label": 1, "normalize": "softmax"}, SIGMOID_2),  # e^3 / (e^1 + e^3) = σ(2)
        ([1.0, 3.0], {"label": 0, "normalize": "softmax"}, 1 - SIGMOID_2),
        ([1.0, 3.0], {"label": 1}, 3.0),
        ([2.0], {"normalize": "standardize", "mean": 1.0, "std": 0.5}, 2.0),  # (2 - 1) / 0.5
        ([0.0], {"normalize": "standardize", "mean": 1.0, "std": 4.0}, -0.25),
    ],
)
def test_normalize_score_by_hand(logits: list[float], kwargs: dict[str, Any], expected: float) -> None:
    assert rm.normalize_score(logits, **kwargs) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("logits", "kwargs", "match"),
    [
        ([1.0], {"label": 1}, "out of range"),
        ([1.0], {"normalize": "standardize", "mean": 0.0}, "std"),
        ([1.0], {"normalize": "standardize", "mean": 0.0, "std": 0.0}, "std"),
    ],
)
def test_normalize_score_refuses_what_it_cannot_do(logits: list[float], kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rm.normalize_score(logits, **kwargs)


def test_step_probability_by_hand() -> None:
    assert rm.step_probability([0.0, 0.0], 1) == 0.5
    assert rm.step_probability([0.0, math.log(3)], 1) == pytest.approx(0.75)  # 3 / (1 + 3)
    assert rm.step_probability([0.0, math.log(3)], 0) == pytest.approx(0.25)
    assert rm.step_probability([0.0], 0) == 0.5  # one label: its sigmoid
    with pytest.raises(ValueError):
        rm.step_probability([0.0], 1)


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("<think>a</think> b", " b"),
        ("a</think>b", "b"),  # a prefilled <think>
        ("<think>still thinking", ""),  # never closed: no answer yet
        ("no tags at all", "no tags at all"),
        ("<think>x</think>y</think>z", "y</think>z"),  # the first closing tag ends it, as for steps
    ],
)
def test_answer_text(response: str, answer: str) -> None:
    assert rm.answer_text(response) == answer


def test_step_marks_by_hand() -> None:
    # The docstring's example: tags go right after each step, before its separator.
    assert rm.with_step_marks("a\n\nb", [1, 4], "<t>") == ("a<t>\n\nb<t>", [1, 7])
    # Without a tag: the body ends after the last step, marks at each step's last character.
    assert rm.with_step_marks("1+1=2\n\n2+2=4 ok", [5, 12], None) == ("1+1=2\n\n2+2=4", [4, 11])
    assert rm.with_step_marks("abc", [], None) == ("", [])
    for bad in ([0], [3, 2], [4]):
        with pytest.raises(ValueError, match="step ends"):
            rm.with_step_marks("abc", bad, None)


def test_token_positions_by_hand() -> None:
    # A BOS with an empty span, three one-character tokens, an EOS with an empty span at the end.
    offsets = [(0, 0), (0, 1), (1, 2), (2, 3), (0, 0)]
    assert rm.token_positions(offsets, [0, 1, 2]) == [1, 2, 3]
    # "é" as two byte tokens sharing one span: its last byte completes it.
    assert rm.token_positions([(0, 1), (1, 2), (1, 2), (2, 3)], [1, 2]) == [2, 3]
    # A multi-character token holds all of its characters.
    assert rm.token_positions([(0, 3), (3, 5)], [0, 2, 4]) == [0, 0, 1]


# ------------------------------------------------------------------------------------------ the batcher


@pytest.fixture
async def batcher():
    restarts: list[str] = []
    pool = WorkerPool("tests.reward_server.model_handlers:score_payload", 1, name="test", on_restart=restarts.append)
    await pool.start(timeout_s=60)
    models = RewardModels(pool, ModelCatalog(), batch_size=4, batch_wait_s=0.05, timeout_s=1.0)
    models.restarts = restarts  # type: ignore[attr-defined]
    yield models
    await models.close()


def _items(*responses: str) -> list[tuple[Any, ...]]:
    return [(None, r, "response", None) for r in responses]


async def test_a_free_worker_takes_the_oldest_items_in_batches(batcher: RewardModels) -> None:
    # 10 items, batches of 4, one worker: 4 + 4 + 2, each result in its own place.
    outcomes = await batcher.score("sequence", _items(*("x" * n for n in range(1, 11))))
    assert [o.value[0] for o in outcomes] == [float(n) for n in range(1, 11)]
    assert [o.value[1] for o in outcomes] == [4.0] * 8 + [2.0] * 2
    assert batcher.batches == 3


async def test_concurrent_requests_share_a_batch(batcher: RewardModels) -> None:
    first, second = await asyncio.gather(
        batcher.score("sequence", _items("a", "bb")), batcher.score("sequence", _items("ccc"))
    )
    assert [o.value for o in first + second] == [[1.0, 3.0], [2.0, 3.0], [3.0, 3.0]]
    assert batcher.batches == 1


async def test_kinds_are_never_mixed_in_a_hand_off(batcher: RewardModels) -> None:
    seq, tok = await asyncio.gather(batcher.score("sequence", _items("a", "b")), batcher.score("token", _items("c")))
    assert [o.value[1] for o in seq] == [2.0, 2.0] and tok[0].value[1] == 1.0
    assert batcher.batches == 2


async def test_one_bad_item_costs_itself_alone(batcher: RewardModels) -> None:
    outcomes = await batcher.score("sequence", _items("a", "bad", "ccc"))
    assert [(o.status, o.value, o.detail) for o in outcomes] == [
        ("ok", [1.0, 3.0], None),
        ("error", None, "cannot encode"),
        ("ok", [3.0, 3.0], None),
    ]


async def test_a_hang_is_timeout_for_its_batch_and_the_worker_is_replaced(batcher: RewardModels) -> None:
    outcomes = await batcher.score("sequence", _items("a", "sleep:30"))
    assert [o.status for o in outcomes] == ["timeout", "timeout"]
    assert all(o.value is None for o in outcomes)
    assert "RLVR_REWARD_MODEL_TIMEOUT_S" in (outcomes[0].detail or "")
    assert batcher.restarts == ["timeout"]  # type: ignore[attr-defined]
    [again] = await batcher.score("sequence", _items("abc"))
    assert again.status == "ok" and again.value == [3.0, 1.0]


async def test_a_dead_worker_is_error_for_its_batch_and_is_replaced(batcher: RewardModels) -> None:
    outcomes = await batcher.score("sequence", _items("a", "die"))
    assert [o.status for o in outcomes] == ["error", "error"]
    assert "exit code 3" in (outcomes[0].detail or "")
    assert batcher.restarts == ["crash"]  # type: ignore[attr-defined]
    [again] = await batcher.score("sequence", _items("ab"))
    assert again.status == "ok" and again.value == [2.0, 1.0]


async def test_a_cancelled_caller_leaves_the_others_their_results(batcher: RewardModels) -> None:
    busy = asyncio.ensure_future(batcher.score("sequence", _items("sleep:0.3")))
    await asyncio.sleep(0.1)  # the worker is busy: what comes now waits in the queue
    gone = asyncio.ensure_future(batcher.score("sequence", _items("x", "y")))
    kept = asyncio.ensure_future(batcher.score("sequence", _items("zzz")))
    await asyncio.sleep(0)
    gone.cancel()
    [k] = await kept
    assert k.value == [3.0, 1.0]  # the cancelled items were not handed over
    assert (await busy)[0].status == "ok"


# ------------------------------------------------------------------------------------------ without torch

# Run with torch and transformers made unimportable: the server starts, scores math, and answers a request for a
# model component with a 422 that says what to set and install; a model path without torch is a clear error.
_WITHOUT_TORCH = """
import json, sys
sys.modules["torch"] = None
sys.modules["transformers"] = None
from fastapi.testclient import TestClient
from reward_server.app import create_app
from reward_server.engine.reward_models import ModelCatalog, ModelError
from reward_server.settings import Settings

out = {}
with TestClient(create_app(Settings(math_workers=1, preload_language_models=False))) as c:
    out["readyz"] = c.get("/readyz").json()
    item = {"id": "a", "response": "so 2", "ground_truth": "2"}
    out["math"] = c.post("/v1/rewards", json={"items": [item]}).json()
    r = c.post("/v1/rewards", json={"items": [{**item, "components": {"reward_model": 1.0}}]})
    out["orm"] = [r.status_code, r.json()]
    r = c.post("/v1/rewards", json={"items": [item], "components": {"reward_model": 1.0}})
    out["request_orm"] = [r.status_code, r.json()]
    r = c.post("/v1/rewards", json={"items": [item], "steps": {"component": "prm"}})
    out["prm"] = [r.status_code, r.json()]
try:
    ModelCatalog.from_settings(Settings(reward_model_path="/some/model"))
except ModelError as exc:
    out["configured"] = str(exc)
out["torch_imported"] = sys.modules.get("torch") is not None
print(json.dumps(out))
"""


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, **env}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=environment)


def test_a_server_without_torch_starts_and_says_what_to_set_and_install() -> None:
    proc = _run([sys.executable, "-c", _WITHOUT_TORCH])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["readyz"]["ready"] is True
    assert (out["readyz"]["checks"]["reward_model"], out["readyz"]["checks"]["prm"]) == ("not configured",) * 2
    assert out["math"]["results"][0]["reward"] == 1.0
    status, body = out["orm"]
    [detail] = body["detail"]
    assert status == 422 and detail["loc"] == ["body", "items", 0, "components", "reward_model"]
    assert "RLVR_REWARD_MODEL_PATH" in detail["msg"] and "pip install 'rlvr[train]'" in detail["msg"]
    status, body = out["request_orm"]
    assert status == 422 and body["detail"][0]["loc"] == ["body", "components", "reward_model"]
    status, body = out["prm"]
    # Asked at the request's level, so named there (not at the first item that inherits it).
    assert status == 422 and body["detail"][0]["loc"] == ["body", "steps", "component"]
    assert "RLVR_PRM_PATH" in body["detail"][0]["msg"]
    assert out["configured"] == (
        "RLVR_REWARD_MODEL_PATH is set but torch and transformers are not installed: install torch and "
        "transformers, from the train extra: pip install 'rlvr[train]'"
    )
    assert out["torch_imported"] is False


def test_serve_with_a_model_it_cannot_use_stops_with_one_line() -> None:
    proc = _run([sys.executable, "-m", "reward_server", "serve"], RLVR_REWARD_MODEL_PATH="/nonexistent/rm")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: RLVR_REWARD_MODEL_PATH=/nonexistent/rm: no /nonexistent/rm/config.json "
        "(give a directory saved with save_pretrained)"
    )
