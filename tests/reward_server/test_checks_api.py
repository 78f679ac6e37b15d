"""``POST /v1/format/check`` and ``POST /v1/language/check`` through the app."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.settings import Settings


@pytest.fixture(scope="module")
def client() -> TestClient:
    # No ``with``: the lifespan (math workers) is not needed by these routes.
    return TestClient(create_app(Settings(math_workers=1, max_response_chars=5000)))


def test_format_check_well_formed(client: TestClient) -> None:
    response = client.post(
        "/v1/format/check", json={"response": "<think>\n2+2\n</think>\n<answer>4</answer><|im_end|>"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["score"] == 1.0 and body["status"] == "ok" and body["format_ok"] is True
    assert body["answer"] == "4" and body["detail"] is None


def test_format_check_prefilled_and_soft(client: TestClient) -> None:
    ok = client.post(
        "/v1/format/check", json={"response": "2+2\n</think>\n<answer>4</answer>", "think_prefilled": True}
    )
    assert ok.json()["score"] == 1.0
    soft = client.post(
        "/v1/format/check", json={"response": "<think>x</think><answer>5</answer> extra", "mode": "soft"}
    ).json()
    assert soft["score"] == pytest.approx(6 / 7) and soft["status"] == "bad_format"
    assert soft["checks"]["nothing_else"] is False and "outside the answer" in soft["detail"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"response": "x", "thinktag": "t"}, "thinktag"),
        ({"response": "x", "mode": "loose"}, "mode"),
        ({"response": 3}, "response"),
        ({}, "response"),
        ({"response": "x" * 5001}, "response"),
    ],
)
def test_format_check_rejects_bad_input_naming_the_field(client: TestClient, payload: dict, field: str) -> None:
    response = client.post("/v1/format/check", json=payload)
    assert response.status_code == 422
    assert field in [str(part) for error in response.json()["detail"] for part in error["loc"]]


def test_language_check(client: TestClient) -> None:
    body = client.post(
        "/v1/language/check",
        json={
            "response": "<think>What is still真 real here is that the sum is ninety degrees.</think>",
            "target": "en",
        },
    ).json()
    assert body["status"] == "ok" and body["target_source"] == "given"
    assert body["word_counts"] == {"en": 12, "zh": 1} and body["score"] == pytest.approx(12 / 13)
    assert body["languages"]["zh"] == pytest.approx(1 / 13)


def test_language_check_from_prompt_and_abstain(client: TestClient) -> None:
    body = client.post(
        "/v1/language/check",
        json={"response": "<think>三角形的内角和是一百八十度。</think>", "prompt": "三角形的内角和是多少？"},
    ).json()
    assert body["score"] == 1.0 and body["target"] == "zh" and body["target_source"] == "prompt"
    short = client.post("/v1/language/check", json={"response": "<think>Yes, 12.</think>", "target": "en"}).json()
    assert short["score"] is None and short["status"] == "too_short" and short["words"] == 1
    default = client.post("/v1/language/check", json={"response": "<think>We add them up now.</think>"}).json()
    assert default["score"] == 1.0 and default["target"] == "en" and default["target_source"] == "default"
    none = client.post(
        "/v1/language/check", json={"response": "<think>We add them up now.</think>", "default_target": None}
    ).json()
    assert none["score"] is None and none["status"] == "no_target"


def test_language_check_reports_how_much_was_read(client: TestClient) -> None:
    cot = "We add them up and the total is even. " * 120  # 4,560 characters
    body = client.post(
        "/v1/language/check", json={"response": f"<think>{cot}</think>", "target": "en", "max_chars": 1000}
    ).json()
    assert body["score"] == 1.0 and body["chars"] == len(cot) and body["chars_read"] <= 1000


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"response": "x", "target": "klingon"}, "target"),
        ({"response": "x", "target": "en", "min_words": 0}, "min_words"),
        ({"response": "x", "target": "en", "languages": ["en"]}, "languages"),
        ({"response": "x", "default_target": "xx"}, "default_target"),
        ({"response": "x", "target": "en", "max_chars": 1_000_000}, "max_chars"),
        ({"target": "en"}, "response"),
    ],
)
def test_language_check_rejects_bad_input_naming_the_field(client: TestClient, payload: dict, field: str) -> None:
    response = client.post("/v1/language/check", json=payload)
    assert response.status_code == 422
    assert field in [str(part) for error in response.json()["detail"] for part in error["loc"]]


def test_docs_carry_examples(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["FormatCheckRequest"]["examples"][0]["response"].startswith("<think>")
    assert schemas["LanguageCheckRequest"]["examples"][0]["target"] == "en"
    assert "description" in schemas["FormatCheckRequest"]["properties"]["mode"]
