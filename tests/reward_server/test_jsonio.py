"""JSON in and out of the API: a malformed body is a 422 that says what is wrong and where; text holding a
lone surrogate is echoed back as sent, never a 500 (``reward_server/jsonio.py``)."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

import reward_server.routers
from reward_server.app import create_app
from reward_server.jsonio import BodyError, JSONBodyRoute, read_json, read_json_in_pieces
from reward_server.settings import Settings

BIG = "9" * 5000  # over Python's 4,300-digit int-string limit


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(math_workers=1, sandbox_pool_size=1, preload_language_models=False))
    with TestClient(app) as c:
        yield c


def post_raw(client: TestClient, path: str, body: str | bytes) -> Any:
    return client.post(path, content=body, headers={"content-type": "application/json"})


# (path, body, loc, msg, why): each was a bare 400 "There was an error parsing the body" naming nothing
# (or a 422 "JSON decode error" without the reason), except where noted.
MALFORMED = [
    (
        "/v1/math/verify",
        '{"response": "x", "ground_truth": "1", "options": {"timeout_s": ' + BIG + "}}",
        ["body", "options", "timeout_s"],
        "an integer of 5000 digits; at most 4300 are accepted (send a longer number as a string)",
        "integer over the int-string limit",
    ),
    (
        "/v1/rewards",
        '{"items": [{"id": "a", "response": "x", "ground_truth": "1"}, {"id": "b", "response": "x", '
        '"ground_truth": "1", "num_tokens": -' + BIG + "}]}",
        ["body", "items", 1, "num_tokens"],
        "an integer of 5000 digits; at most 4300 are accepted (send a longer number as a string)",
        "negative huge integer, second item",
    ),
    (
        "/v1/math/verify",
        '{"response": "x", "ground_truth": "1"',
        ["body", 37],
        "invalid JSON: Expecting ',' delimiter at line 1, column 38",
        "truncated body (was a 422 without the reason)",
    ),
    (
        "/v1/format/check",
        '{"response": "a\x01b"}',
        ["body", 15],
        "invalid JSON: Invalid control character at line 1, column 16",
        "raw control character in a string",
    ),
    (
        "/v1/math/verify",
        '{"response": "\\uZZZZ", "ground_truth": "1"}',
        ["body", 15],
        "invalid JSON: Invalid \\uXXXX escape at line 1, column 16",
        "bad escape",
    ),
    (
        "/v1/rewards",
        b'{"items": [{"id": "a", "response": "\xff\xfe", "ground_truth": "1"}]}',
        ["body", 36],
        "the body is not UTF-8 text: byte 36 (b'\\xff') is invalid start byte; send JSON encoded as UTF-8",
        "not UTF-8",
    ),
    (
        "/v1/language/check",
        '{"response": ' + "[" * 5000 + "]" * 5000 + "}",
        ["body"],
        "the JSON nests arrays and objects too deeply (the parser stops near 1000)",
        "nesting past the recursion limit",
    ),
    (
        "/v1/code/run",
        '{"language": "python", "code": "print(1)", "limits": {"memory_mb": ' + BIG + "}}",
        ["body", "limits", "memory_mb"],
        "an integer of 5000 digits; at most 4300 are accepted (send a longer number as a string)",
        "code endpoint",
    ),
]


@pytest.mark.parametrize(("path", "body", "loc", "msg", "why"), MALFORMED, ids=[m[-1] for m in MALFORMED])
def test_malformed_bodies_are_422_saying_what_and_where(
    client: TestClient, path: str, body: str | bytes, loc: list[Any], msg: str, why: str
) -> None:
    r = post_raw(client, path, body)
    assert r.status_code == 422, (why, r.text)
    assert r.json() == {"detail": [{"loc": loc, "msg": msg, "type": "json_invalid"}]}, why


def test_read_json_reads_what_json_loads_reads() -> None:
    assert read_json(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert read_json("[1]".encode("utf-16")) == [1]  # json.loads detects UTF-16 and UTF-32
    assert read_json(b"\xef\xbb\xbf[2]") == [2]  # and a UTF-8 byte-order mark
    assert read_json(("1" * 4300).encode()) == int("1" * 4300)  # at the limit: still a number
    with pytest.raises(BodyError) as info:
        read_json(b'{"a": {"b": [0, 1, ' + b"1" * 4301 + b"]}}")
    assert info.value.loc == ("body", "a", "b", 2)


def test_every_route_with_a_body_reads_it_through_jsonbodyroute() -> None:
    posts = []
    for module in pkgutil.iter_modules(reward_server.routers.__path__):
        router = getattr(importlib.import_module(f"reward_server.routers.{module.name}"), "router", None)
        if router is not None:
            posts += [r for r in router.routes if isinstance(r, APIRoute) and r.methods & {"POST", "PUT", "PATCH"}]
    assert len(posts) >= 6
    assert [r.path for r in posts if not isinstance(r, JSONBodyRoute)] == []


def test_huge_numbers_in_fields_are_422_not_500(client: TestClient) -> None:
    item = {"id": "a", "response": "\\boxed{1}", "ground_truth": "1"}
    big = int("9" * 4000)  # within the int limit, but past any float
    for components, loc in (
        ({"accuracy": big}, ["body", "components", "accuracy", "weight"]),
        ({"accuracy": {"weight": -big}}, ["body", "components", "accuracy", "weight"]),
    ):
        r = client.post("/v1/rewards", json={"items": [item], "components": components})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == loc
    r = client.post("/v1/rewards", json={"items": [{**item, "num_tokens": big}], "components": {"overlong": 1}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "items", 0, "num_tokens"]
    r = client.post("/v1/rewards", json={"items": [{**item, "num_tokens": 10**9}], "components": {"overlong": 1}})
    assert r.status_code == 200, r.text


def test_infinite_tolerances_are_422(client: TestClient) -> None:
    # abs_tol=Infinity made every number equal to every other.
    for kind, extra in (("stdio", {"cases": [{"input": "", "output": "1"}], "comparator": "float"}),):
        for field in ("abs_tol", "rel_tol"):
            tests = {"type": kind, **extra, field: float("inf")}
            body = json.dumps({"language": "python", "code": "print(2)", "tests": tests})
            r = post_raw(client, "/v1/code/test", body)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "tests", kind, field], r.text
    tests = {"type": "call", "fn_name": "f", "cases": [{"input": [1], "output": 1}], "abs_tol": float("nan")}
    r = post_raw(client, "/v1/code/test", json.dumps({"language": "python", "code": "f = abs", "tests": tests}))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "tests", "call", "abs_tol"], r.text


def test_lone_surrogates_are_echoed_back_as_sent(client: TestClient) -> None:
    # "\ud800" is legal JSON that strict UTF-8 cannot encode: echoing it (an extracted answer, a format
    # check's answer, a component name in an error) made the response fail with a 500.
    def post(path: str, payload: dict[str, Any]) -> Any:
        r = post_raw(client, path, json.dumps(payload))  # json.dumps writes the escape
        assert r.status_code in (200, 422), (path, r.text)
        assert b"\\ud8" in r.content or b"\\udc" in r.content or b"\\udf" in r.content  # escaped, not raw
        return r.status_code, r.json()

    code, body = post("/v1/math/verify", {"response": "The answer is \\boxed{4\ud8002}.", "ground_truth": "42"})
    assert (code, body["extracted_answer"], body["correct"]) == (200, "4\ud8002", False)
    code, body = post("/v1/math/verify", {"response": "\\boxed{42}", "ground_truth": "4\udc002"})
    assert (code, body["ground_truth_parsed"], body["correct"]) == (200, "4\udc002", False)
    code, body = post("/v1/format/check", {"response": "<think>a\ud800b</think>The answer\udfff."})
    assert (code, body["score"], body["answer"]) == (200, 1.0, "The answer\udfff.")
    item = {"id": "x", "response": "<think>add them</think>\\boxed{4\ud8002}", "ground_truth": "4\ud8002"}
    for preset in ("r1_zero", "r1"):
        code, body = post("/v1/rewards", {"items": [{**item, "prompt": "Add\ud800 them"}], "preset": preset})
        accuracy = body["results"][0]["components"]["accuracy"]
        assert (code, accuracy["score"], accuracy["info"]["extracted_answer"]) == (200, 1.0, "4\ud8002")
    code, body = post("/v1/rewards", {"items": [{**item, "components": {"acc\ud800": 1}}]})
    assert (code, body["detail"][0]["loc"]) == (422, ["body", "items", 0, "components", "acc\ud800"])


@pytest.mark.parametrize(
    "body",
    [
        b'{"items": [{"id": "a", "response": "x"}, {"id": "b"}], "preset": "r1"}',
        b' \n{ "items" : [ ] , "components" : {"accuracy": 1.5} }\n',
        b'{"items": [1, [2, [3]], "\\u00e9", null, true, -0.5e3], "x": [], "y": {}}',
        b'{"a": 1, "a": 2}',  # the last duplicate wins, as in json.loads
        '{"items": ["数学 ✓"]}'.encode(),
    ],
)
def test_large_bodies_parse_piece_by_piece_as_json_loads_does(body: bytes) -> None:
    assert read_json_in_pieces(body) == json.loads(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"items": [1, 2,]}',
        b'{"items": [1 2]}',
        b'{"a": 1,}',
        b'{"a": 1} x',
        b"[1, 2]",
        b'{"items": [1]',
        b'{"n": ' + b"9" * 5000 + b"}",
        '{"x": "é"}'.encode("utf-16"),
        b'{"x": "\xff"}',
    ],
)
def test_large_bodies_that_are_unusual_or_bad_get_read_jsons_answer(body: bytes) -> None:
    try:
        expected: object = read_json(body)
    except BodyError as exc:
        with pytest.raises(BodyError) as got:
            read_json_in_pieces(body)
        assert (got.value.loc, got.value.msg) == (exc.loc, exc.msg)
    else:
        assert read_json_in_pieces(body) == expected
