"""Composition in POST /v1/rewards: components with weights and parameters, presets, nulls and abstentions."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.engine.components import REGISTRY
from reward_server.engine.resolve import PRESETS
from reward_server.settings import Settings

GOOD = (
    "<think>\nThe farmer has 3 pens with 4 sheep in each pen, so there are 3 times 4 sheep in total.\n</think>\n"
    "<answer>\\boxed{12}</answer>"
)
NO_THINK_WRONG = "The answer is \\boxed{13}."
CHINESE_COT = (
    "<think>\n农夫有三个羊圈，每个羊圈里有四只羊，所以一共有十二只羊。\n</think>\n<answer>\\boxed{12}</answer>"
)


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(math_workers=1, math_timeout_s=2.0))) as c:
        yield c


def score(client: TestClient, items: list[dict], **request) -> list[dict]:
    r = client.post("/v1/rewards", json={"items": items, **request})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_weighted_sum_with_every_component_back(client: TestClient) -> None:
    comps = {"accuracy": 1.0, "format": 0.5, "language": 0.25}
    [good, bad] = score(
        client,
        [
            {"id": "good", "response": GOOD, "ground_truth": "12", "language": "en"},
            {"id": "bad", "response": NO_THINK_WRONG, "ground_truth": "12", "language": "en"},
        ],
        components=comps,
    )
    # 1.0*1 + 0.5*1 + 0.25*1
    assert good["reward"] == pytest.approx(1.75)
    assert {k: v["score"] for k, v in good["components"].items()} == {"accuracy": 1.0, "format": 1.0, "language": 1.0}
    assert {k: v["weight"] for k, v in good["components"].items()} == comps
    # Wrong and no layout: accuracy 0, format 0; language reads the whole text (no think block), which is
    # too short to judge, so it abstains and counts as consistent: 0.25.
    assert bad["components"]["accuracy"]["score"] == 0.0
    assert bad["components"]["format"]["status"] == "bad_format"
    assert bad["components"]["language"]["status"] == "too_short"
    assert bad["reward"] == pytest.approx(0.25)


def test_presets(client: TestClient) -> None:
    assert PRESETS["r1_zero"] == {"accuracy": 1.0, "format": 1.0}
    [zero] = score(client, [{"id": "a", "response": GOOD, "ground_truth": "12"}], preset="r1_zero")
    assert set(zero["components"]) == {"accuracy", "format"} and zero["reward"] == 2.0
    [r1] = score(client, [{"id": "a", "response": CHINESE_COT, "ground_truth": "12", "language": "en"}], preset="r1")
    assert set(r1["components"]) == {"accuracy", "format", "language"}
    assert r1["components"]["language"]["score"] == 0.0  # all Chinese, target English
    assert r1["reward"] == 2.0


def test_item_overrides_request_and_preset_weights(client: TestClient) -> None:
    items = [
        {"id": "a", "response": GOOD, "ground_truth": "12", "components": {"format": 0.1}},
        {"id": "b", "response": GOOD, "ground_truth": "12"},
    ]
    [a, b] = score(client, items, preset="r1_zero")
    assert a["reward"] == pytest.approx(1.1) and a["components"]["format"]["weight"] == 0.1
    assert b["reward"] == 2.0
    # Parameters without a weight keep the preset's weight.
    items = [{"id": "c", "response": GOOD.replace("<think>\n", ""), "ground_truth": "12"}]
    [c] = score(client, items, preset="r1_zero", components={"format": {"think_prefilled": True}})
    assert c["components"]["format"] == {**c["components"]["format"], "score": 1.0, "weight": 1.0}


def test_unscorable_component_nulls_the_reward(client: TestClient) -> None:
    # No target language, no prompt and no default target: the language component cannot be scored.
    no_default = {"weight": 1, "default_target": None}
    [r] = score(
        client,
        [{"id": "a", "response": GOOD, "ground_truth": "12"}],
        components={"accuracy": 1, "language": no_default},
    )
    assert r["reward"] is None and r["status"] == "no_target"
    assert r["components"]["accuracy"]["score"] == 1.0  # the others still come back
    # A weight of 0 reports the component without letting it null the reward.
    [r] = score(
        client,
        [{"id": "a", "response": GOOD, "ground_truth": "12"}],
        components={"accuracy": 1, "language": {**no_default, "weight": 0}},
    )
    assert r["reward"] == 1.0 and r["components"]["language"]["status"] == "no_target"


def test_short_chain_of_thought_abstains_without_dropping_the_sample(client: TestClient) -> None:
    item = {
        "id": "a",
        "response": "<think>Yes, 12.</think>\n<answer>12</answer>",
        "ground_truth": "12",
        "language": "en",
    }
    [r] = score(client, [item], components={"accuracy": 1.0, "language": 0.5})
    lang = r["components"]["language"]
    assert lang["score"] is None and lang["status"] == "too_short"
    assert "counted as 1" in lang["detail"]
    assert r["reward"] == 1.5 and r["status"] == "ok"


def test_language_target_from_prompt(client: TestClient) -> None:
    item = {
        "id": "a",
        "response": CHINESE_COT,
        "ground_truth": "12",
        "prompt": "农夫有三个羊圈，每个羊圈有四只羊。一共有多少只羊？",
    }
    [r] = score(client, [item], components={"language": 1.0})
    assert r["components"]["language"]["info"]["target"] == "zh"
    assert r["reward"] == 1.0


def test_shaping_components(client: TestClient) -> None:
    long_wrong = "<think>" + "step " * 50 + "</think> \\boxed{13}"
    comps = {
        "accuracy": 1.0,
        "overlong": {"weight": 1.0, "max_completion_length": 100, "soft_punish_cache": 50},
        "cosine": {"weight": 1.0, "max_completion_length": 100},
        "repetition": {"weight": 1.0, "ngram_size": 2, "max_penalty": -1.0},
    }
    [r] = score(client, [{"id": "a", "response": long_wrong, "ground_truth": "12", "num_tokens": 75}], components=comps)
    c = r["components"]
    # DAPO: L_max - L_cache = 50 < 75 <= 100 -> (50 - 75) / 50 = -0.5
    assert c["overlong"]["score"] == pytest.approx(-0.5)
    # Yeo et al.: wrong answer at t = 75 of 100: -0.5 + 0.5 * (-1 + 0.5) * (1 + cos(0.75 pi))
    assert c["cosine"]["score"] == pytest.approx(-0.5 + 0.5 * (-0.5) * (1 + math.cos(0.75 * math.pi)))
    assert c["repetition"]["score"] < -0.9
    assert r["reward"] == pytest.approx(sum(v["score"] for v in c.values()))


def test_cosine_needs_accuracy(client: TestClient) -> None:
    r = client.post(
        "/v1/rewards",
        json={"items": [{"id": "a", "response": GOOD, "ground_truth": "12"}], "components": {"cosine": 1}},
    )
    assert r.status_code == 422
    assert "needs 'accuracy'" in r.json()["detail"][0]["msg"]


def test_unknown_component_lists_valid_names(client: TestClient) -> None:
    r = client.post(
        "/v1/rewards",
        json={"items": [{"id": "a", "response": GOOD, "ground_truth": "12"}], "components": {"lenght": 1}},
    )
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "components", "lenght"]
    for name in REGISTRY:
        assert name in err["msg"]


@pytest.mark.parametrize(
    ("components", "loc"),
    [
        ({"format": {"weight": 1, "mode": "loose"}}, ["body", "components", "format", "mode"]),
        ({"format": {"weight": "heavy"}}, ["body", "components", "format", "weight"]),
        ({"format": True}, ["body", "components", "format"]),
        (
            {"overlong": {"weight": 1, "max_completion_length": -5}},
            ["body", "components", "overlong", "max_completion_length"],
        ),
    ],
)
def test_bad_parameters_are_422_naming_them(client: TestClient, components: dict, loc: list) -> None:
    body = {"items": [{"id": "a", "response": GOOD, "ground_truth": "12"}], "components": components}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][: len(loc)] == loc


def test_unsupported_language_is_422(client: TestClient) -> None:
    body = {"items": [{"id": "a", "response": GOOD, "ground_truth": "12", "language": "xx"}]}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:4] == ["body", "items", 0, "language"]


@pytest.mark.parametrize(
    ("components", "loc"),
    [
        ({"accuracy": float("inf")}, ["body", "components", "accuracy", "weight"]),
        ({"accuracy": 1e308}, ["body", "components", "accuracy", "weight"]),
        ({"accuracy": 1, "cosine": {"weight": 1, "correct_at_zero": float("nan")}}, ["body", "components", "cosine"]),
        ({"accuracy": 1, "repetition": {"weight": 1, "max_penalty": -1e300}}, ["body", "components", "repetition"]),
    ],
)
def test_non_finite_weights_and_parameters_are_422(client: TestClient, components: dict, loc: list) -> None:
    import json

    body = json.dumps({"items": [{"id": "a", "response": GOOD, "ground_truth": "12"}], "components": components})
    r = client.post("/v1/rewards", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][: len(loc)] == loc


def test_cosine_reads_code_accuracy(client: TestClient) -> None:
    code = "<think>sq</think>\n```python\ndef sq(x):\n    return x * x\n```"
    tests = {"type": "assert", "test_list": ["assert sq(2) == 4"]}
    comps = {"accuracy": 1.0, "cosine": {"weight": 1.0, "max_completion_length": 100}}
    [r] = score(
        client, [{"id": "c", "task": "code", "response": code, "tests": tests, "num_tokens": 0}], components=comps
    )
    # All tests passed counts as correct: the correct curve at length 0 gives correct_at_zero = 1.0.
    assert r["components"]["cosine"]["score"] == pytest.approx(1.0)
    assert r["reward"] == pytest.approx(2.0)


@pytest.mark.parametrize("where", ["request", "item"])
def test_empty_preset_is_422(client: TestClient, where: str) -> None:
    """``"preset": ""`` used to mean no preset: a blank config value silently dropped format and language."""
    item = {"id": "a", "response": GOOD, "ground_truth": "12"}
    body = {"items": [{**item, "preset": ""}]} if where == "item" else {"items": [item], "preset": ""}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"] == (["body", "items", 0, "preset"] if where == "item" else ["body", "preset"])
    assert "r1_zero" in err["msg"] and "null" in err["msg"]


def test_cosine_without_accuracy_verdict_reports_the_cause(client: TestClient) -> None:
    """Accuracy abstains (an unreadable reference): cosine is null too, and the item's status is accuracy's,
    whatever the order or the weight of accuracy, so a trainer can tell bad data from a timeout."""
    item = {"id": "a", "response": GOOD, "ground_truth": "\\frac{1}{"}
    for comps in (
        {"cosine": 1.0, "accuracy": 1.0},
        {"cosine": 1.0, "accuracy": 0.0},
        {"accuracy": 1.0, "cosine": 1.0},
    ):
        [r] = score(client, [item], components=comps)
        assert r["reward"] is None and r["status"] == "invalid_ground_truth", (comps, r)
        cosine = r["components"]["cosine"]
        assert cosine["score"] is None and cosine["status"] == "no_accuracy"
        assert "accuracy is invalid_ground_truth" in cosine["detail"]


def test_cosine_follows_the_accuracy_verdict(client: TestClient) -> None:
    """Right, wrong and no answer at the same length: the correct curve, the wrong curve (a missing answer
    is wrong, not an abstention)."""
    comps = {"accuracy": 0.0, "cosine": {"weight": 1.0, "max_completion_length": 100}}
    items = [
        {"id": "right", "response": GOOD, "ground_truth": "12", "num_tokens": 50},
        {"id": "wrong", "response": GOOD, "ground_truth": "13", "num_tokens": 50},
        {"id": "none", "response": "<think>no idea</think> I give up.", "ground_truth": "12", "num_tokens": 50},
    ]
    right, wrong, none = score(client, items, components=comps)
    # t = T/2: at_max + (at_zero - at_max) * (1 + cos(pi/2)) / 2 = the midpoint.
    assert right["reward"] == pytest.approx(0.75) and wrong["reward"] == pytest.approx(-0.75)
    assert none["components"]["accuracy"]["status"] == "no_answer" and none["reward"] == pytest.approx(-0.75)


def test_r1_preset_on_a_code_item_with_language_override(client: TestClient) -> None:
    """r1 on a code item: accuracy runs the tests, format accepts the fenced program as the answer, and the
    item's own language target decides the language score (the English thinking is 0 for a zh target)."""
    code = (
        "<think>\nI will read the number and print its square, which is the number times itself.\n</think>\n"
        "```python\nprint(int(input()) ** 2)\n```"
    )
    tests = {"type": "stdio", "cases": [{"input": "3", "output": "9"}]}
    base = {"task": "code", "response": code, "tests": tests}
    en, zh = score(client, [{"id": "en", **base}, {"id": "zh", **base, "language": "zh"}], preset="r1")
    assert en["components"]["format"]["score"] == 1.0 and en["components"]["language"]["score"] == 1.0
    assert zh["components"]["language"]["score"] == 0.0
    if en["components"]["accuracy"]["status"] == "ok":  # where a sandbox runs code
        assert en["reward"] == 3.0 and zh["reward"] == 2.0
    else:
        assert en["reward"] is None and en["status"] == en["components"]["accuracy"]["status"]
