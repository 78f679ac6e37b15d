"""Step rewards (process supervision): splitting into steps with hand-computed spans, the exact arithmetic check,
and ``steps`` in ``POST /v1/rewards``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.settings import Settings
from reward_server.verifiers.steps import Step, check_claim, score_arithmetic_step, split_steps

# ---------------------------------------------------------------------------------------------------- splitting


def _texts(response: str, steps: list[Step]) -> list[str]:
    return [response[s.start : s.end] for s in steps]


@pytest.mark.parametrize(
    ("response", "separator", "scope", "spans"),
    [
        # Two steps inside the think block, split at the blank line; "<think>" is 7 characters.
        ("<think>1 + 2 = 3\n\n3 + 4 = 7</think>\n<answer>7</answer>", "\n\n", "reasoning", [(7, 16), (18, 27)]),
        # Without a think block the whole completion is the reasoning; whitespace is trimmed, empty steps dropped.
        ("  a = 1\n\n\n\n b\n\n", "\n\n", "reasoning", [(2, 7), (12, 13)]),
        # A prefilled <think>: only the closing tag is in the completion.
        ("x\ny</think> answer", "\n", "reasoning", [(0, 1), (2, 3)]),
        # An unclosed think block runs to the end.
        ("<think>a\nb", "\n", "reasoning", [(7, 8), (9, 10)]),
        # scope "response": the answer is a step too.
        ("<think>a</think>\nb", "\n", "response", [(0, 16), (17, 18)]),
        ("<think></think>answer", "\n\n", "reasoning", []),  # an empty think block has no step
        ("one. two. three", ". ", "reasoning", [(0, 3), (5, 8), (10, 15)]),
    ],
)
def test_split_steps_hand_computed(response: str, separator: str, scope: str, spans: list[tuple[int, int]]) -> None:
    steps = split_steps(response, separator, scope)  # type: ignore[arg-type]
    assert [(s.start, s.end) for s in steps] == spans
    for text in _texts(response, steps):
        assert text == text.strip() and text


def test_spans_are_code_point_offsets_into_the_completion_as_sent() -> None:
    response = "<think>計算: 3 × 4 = 12 🙂\n\n12 + 1 = 13</think>"
    steps = split_steps(response)
    assert _texts(response, steps) == ["計算: 3 × 4 = 12 🙂", "12 + 1 = 13"]


# ----------------------------------------------------------------------------------------- the arithmetic check


@pytest.mark.parametrize(
    ("text", "score", "status"),
    [
        ("3 + 4 = 7, carry 1.", 1.0, "ok"),
        ("13 - 7 = 6, borrow 1. 8 - 1 - 4 = 3.", 1.0, "ok"),  # two claims, both true
        ("8 - 1 - 4 = 4.", 0.0, "wrong"),  # left to right: 3
        ("2 + 3 * 4 = 14", 1.0, "ok"),  # precedence: not 20
        ("2 + 3 * 4 = 20", 0.0, "wrong"),
        ("12 / 4 = 3 and 7 × 6 = 42 and 2x5 = 10", 1.0, "ok"),
        ("10 ÷ 4 = 2.5", 1.0, "ok"),  # exact rationals
        ("0.1 + 0.2 = 0.3", 1.0, "ok"),  # no float rounding
        ("3 - 5 = -2", 1.0, "ok"),
        ("5 -3 = 2", 1.0, "ok"),  # "-3" after an operand is a subtraction
        ("1 / 0 = 0", 0.0, "wrong"),  # a division by zero is never true
        ("2 + 2 = 4 = 4", 1.0, "ok"),
        ("2 + 2 = 4 = 5", 0.0, "wrong"),
        ("3 + 4 = 7. 5 + 5 = 11.", 0.0, "wrong"),  # one false claim makes the step wrong
        ("The answer is 36.", None, "no_claim"),  # nothing to check: neutral
        ("carry 1", None, "no_claim"),
        ("x = 5", None, "no_claim"),  # an unknown is not a number
        ("v2 = 2", None, "no_claim"),  # glued to a word
    ],
)
def test_arithmetic_steps_are_checked_exactly(text: str, score: float | None, status: str) -> None:
    result = score_arithmetic_step(text)
    assert (result.score, result.status) == (score, status)


def test_a_false_claim_is_named() -> None:
    result = score_arithmetic_step("3 + 4 = 7. 5 + 5 = 11.")
    assert result.detail == "false: 5 + 5 = 11"
    assert result.info == {"claims": 2, "false": 1}
    assert check_claim("6 * 7 = 42") and not check_claim("6 * 7 = 43")


# ------------------------------------------------------------------------------------------------------ the API


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(math_workers=1, math_timeout_s=2.0))) as c:
        yield c


RESPONSE = "<think>4 + 8 = 12, carry 1.\n\n1 + 2 + 1 = 5.\n\nSo the answer is 42.</think>\n<answer>42</answer>"


def test_steps_come_back_with_spans_and_scores_and_leave_the_reward_alone(client: TestClient) -> None:
    body = {"items": [{"id": "a", "response": RESPONSE, "ground_truth": "42", "steps": {"component": "arithmetic"}}]}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert result["reward"] == 1.0  # accuracy only: the steps do not change it
    steps = result["steps"]
    assert [(s["start"], s["end"]) for s in steps] == [
        (7, 27),
        (29, 43),
        (45, 65),
    ]  # "<think>" is 7 characters, the first step 20
    assert [RESPONSE[s["start"] : s["end"]] for s in steps] == [
        "4 + 8 = 12, carry 1.",
        "1 + 2 + 1 = 5.",
        "So the answer is 42.",
    ]
    assert [(s["score"], s["status"]) for s in steps] == [(1.0, "ok"), (0.0, "wrong"), (None, "no_claim")]


def test_the_request_default_and_the_item_override(client: TestClient) -> None:
    body = {
        "items": [
            {"id": "default", "response": "1 + 1 = 2\n2 + 2 = 5", "ground_truth": "5"},
            {"id": "own", "response": "1 + 1 = 2\n2 + 2 = 5", "ground_truth": "5", "steps": {"separator": "\n\n"}},
            {"id": "none", "response": "1 + 1 = 2", "ground_truth": "2"},
        ],
        "steps": {"separator": "\n"},
    }
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    default, own, _ = r.json()["results"]
    assert [s["score"] for s in default["steps"]] == [1.0, 0.0]
    assert [s["score"] for s in own["steps"]] == [0.0]  # one step holding both lines
    plain = client.post("/v1/rewards", json={"items": [body["items"][2]]}).json()["results"][0]
    assert plain["steps"] is None  # not asked for


@pytest.mark.parametrize(
    ("steps", "loc"),
    [
        ({"component": "prm"}, ["body", "items", 0, "steps", "component"]),
        ({"separator": ""}, ["body", "items", 0, "steps", "separator"]),
        ({"scope": "answer"}, ["body", "items", 0, "steps", "scope"]),
        ({"separtor": "\n"}, ["body", "items", 0, "steps", "separtor"]),
    ],
)
def test_a_bad_steps_request_is_a_422_naming_the_field(client: TestClient, steps: dict, loc: list) -> None:
    body = {"items": [{"id": "a", "response": "1 + 1 = 2", "ground_truth": "2", "steps": steps}]}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc
    # The same at the request's level is named there, not at the first item that inherits it.
    body = {"items": [{"id": "a", "response": "1 + 1 = 2", "ground_truth": "2"}], "steps": steps}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", *loc[3:]]
