"""What a client sees of the server's operations, in process: API keys (401), backpressure (429), the drain
(503), request ids and the access log. The same against a real server process: ``test_faults.py``."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.logs import JsonFormatter, TextFormatter
from reward_server.settings import Settings
from rlvr_client.client import RetryPolicy, RewardClient, RewardItem, RewardServerError

KEY = "k3y-0123456789abcdef"
OTHER_KEY = "other-0123456789abcdef"
ITEM = {"id": "a", "response": "\\boxed{4}", "ground_truth": "4"}


def settings(**values: object) -> Settings:
    base: dict[str, object] = {"math_workers": 1, "sandbox_pool_size": 1, "preload_language_models": False}
    return Settings(**{**base, **values})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def keyed() -> Iterator[TestClient]:
    with TestClient(create_app(settings(api_keys=f"{KEY},{OTHER_KEY}"))) as c:
        yield c


@pytest.fixture(scope="module")
def small() -> Iterator[TestClient]:
    """A server whose queue holds 8 items."""
    with TestClient(create_app(settings(max_queued_items=8, max_batch_items=8))) as c:
        yield c


# ----------------------------------------------------------------------------------------------- API keys


@pytest.mark.parametrize(
    ("headers", "challenge", "reason"),
    [
        ({}, 'Bearer realm="rlvr"', "no key"),
        ({"Authorization": "Bearer wrong-key-0123456789"}, 'Bearer realm="rlvr", error="invalid_token"', "wrong key"),
        ({"Authorization": f"Basic {KEY}"}, 'Bearer realm="rlvr"', "another scheme is no bearer token"),
        ({"Authorization": f"Bearer {KEY}x"}, 'Bearer realm="rlvr", error="invalid_token"', "a longer key"),
        ({"Authorization": f"Bearer {KEY[:-1]}"}, 'Bearer realm="rlvr", error="invalid_token"', "a prefix"),
    ],
)
def test_v1_without_a_valid_key_is_401(keyed: TestClient, headers: dict[str, str], challenge: str, reason: str) -> None:
    for path in ("/v1/rewards", "/v1/math/verify"):
        body = {"items": [ITEM]} if path == "/v1/rewards" else {"response": "4", "ground_truth": "4"}
        r = keyed.post(path, json=body, headers=headers)
        assert r.status_code == 401, reason
        assert r.headers["www-authenticate"] == challenge, reason
        assert "API key" in r.json()["detail"]


@pytest.mark.parametrize("key", [KEY, OTHER_KEY])
def test_every_configured_key_works(keyed: TestClient, key: str) -> None:
    for scheme in ("Bearer", "bearer"):
        r = keyed.post("/v1/rewards", json={"items": [ITEM]}, headers={"Authorization": f"{scheme} {key}"})
        assert r.status_code == 200 and r.json()["results"][0]["reward"] == 1.0


def test_probes_and_docs_stay_open(keyed: TestClient) -> None:
    assert keyed.get("/healthz").status_code == 200
    assert keyed.get("/readyz").status_code == 200
    assert keyed.get("/metrics").status_code == 200
    assert keyed.get("/openapi.json").status_code == 200


def test_metrics_can_need_a_key() -> None:
    with TestClient(create_app(settings(api_keys=KEY, auth_metrics=True))) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert c.get("/healthz").status_code == 200


def test_client_sends_its_key(keyed: TestClient) -> None:
    item = RewardItem(id="q", task="math", response="\\boxed{4}", ground_truth="4")
    with RewardClient("http://testserver", client=keyed, api_key=KEY) as rc:
        assert rc.score([item])[0].reward == 1.0
    with RewardClient("http://testserver", client=keyed) as rc, pytest.raises(RewardServerError) as exc:
        rc.score([item])
    assert exc.value.status_code == 401 and "RLVR_API_KEY" in str(exc.value) and KEY not in str(exc.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"api_keys": "short"}, "at least 16"),
        ({"api_keys": "has space in it 0123"}, "space"),
        ({"max_queued_items": 10, "max_batch_items": 64}, "RLVR_MAX_QUEUED_ITEMS"),
    ],
)
def test_bad_operations_settings_fail_fast(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message) as exc:
        Settings(**values)  # type: ignore[arg-type]
    assert "has space in it" not in str(exc.value)  # an invalid key is never echoed


def test_keys_from_a_file(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "keys"  # type: ignore[operator]
    path.write_text(f"# rotated 2025-01\n{KEY}\n\n  {OTHER_KEY}  \n")
    s = Settings(api_keys_file=path)
    assert s.api_key_values() == [KEY, OTHER_KEY]
    assert KEY not in repr(s)
    path.write_text("# nothing\n")
    with pytest.raises(ValueError, match="holds no key"):
        Settings(api_keys_file=path)


def test_listening_beyond_loopback_without_keys_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "reward_server"), TestClient(create_app(settings(host="0.0.0.0"))):
        pass
    assert any("without API keys" in r.getMessage() and "0.0.0.0" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "reward_server"), TestClient(create_app(settings(host="127.0.0.1"))):
        pass
    assert not any("without API keys" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------------------------- backpressure


def test_a_batch_that_does_not_fit_is_429_and_nothing_of_it_runs(small: TestClient) -> None:
    budget = small.app.state.budget  # type: ignore[attr-defined]
    scored_before = _items_scored(small)
    with budget.admit(5):  # 5 of 8 held by "another request"
        items = [{**ITEM, "id": str(i)} for i in range(4)]
        r = small.post("/v1/rewards", json={"items": items})
        assert r.status_code == 429
        assert r.headers["retry-after"].isdigit() and int(r.headers["retry-after"]) >= 1
        assert "RLVR_MAX_QUEUED_ITEMS" in r.json()["detail"]
        assert _items_scored(small) == scored_before  # refused whole: not one item was scored
        r = small.post("/v1/rewards", json={"items": items[:3]})  # 5 + 3 = 8 fits
        assert r.status_code == 200 and [x["id"] for x in r.json()["results"]] == ["0", "1", "2"]
        r = small.post("/v1/math/verify", json={"response": "4", "ground_truth": "4"})
        assert r.status_code == 200
    assert budget.queued == 0


def test_a_full_queue_refuses_before_reading_the_body(small: TestClient) -> None:
    budget = small.app.state.budget  # type: ignore[attr-defined]
    with budget.admit(8):
        r = small.post("/v1/rewards", content=b"not even json", headers={"content-type": "application/json"})
        assert r.status_code == 429 and r.headers["retry-after"].isdigit()
        assert small.get("/healthz").status_code == 200  # probes are never refused
    metrics = small.get("/metrics").text
    assert 'rlvr_refused_requests_total{reason="queue_full"}' in metrics


def _items_scored(c: TestClient) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith('rlvr_items_total{task="math"}'):
            return float(line.split()[-1])
    return 0.0


# ----------------------------------------------------------------------------------------------- drain


def test_while_draining_work_is_refused_with_503_and_readyz_says_so() -> None:
    with TestClient(create_app(settings())) as c:
        drain = c.app.state.drain  # type: ignore[attr-defined]
        assert c.get("/readyz").status_code == 200
        drain.draining = True
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["draining"] is True
        r = c.post("/v1/rewards", json={"items": [ITEM]})
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert c.get("/healthz").status_code == 200  # alive, only not ready


# ----------------------------------------------------------------------------------------------- limits


def test_a_chunked_body_over_the_limit_is_413() -> None:
    with TestClient(create_app(settings(max_body_mb=0.01))) as c:

        def chunks() -> Iterator[bytes]:
            yield b'{"items": ['
            for i in range(1000):
                yield json.dumps({**ITEM, "id": str(i)}).encode() + b","
            yield json.dumps(ITEM).encode() + b"]}"

        r = c.post("/v1/rewards", content=chunks(), headers={"content-type": "application/json"})
        assert "content-length" not in r.request.headers  # sent chunked
        assert r.status_code == 413 and "RLVR_MAX_BODY_MB" in r.json()["detail"]
        assert c.post("/v1/rewards", json={"items": [ITEM]}).status_code == 200


# ----------------------------------------------------------------------------------------------- ids and logs


def test_request_id_is_echoed_or_made(small: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, "reward_server.access"):
        r = small.post(
            "/v1/rewards",
            json={"items": [ITEM, {**ITEM, "id": "b", "response": "5"}]},
            headers={"X-Request-ID": "trainer-step-7.3"},
        )
    assert r.headers["x-request-id"] == "trainer-step-7.3"
    [record] = [x for x in caplog.records if x.name == "reward_server.access"]
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["request_id"] == "trainer-step-7.3" and fields["status"] == 200
    assert fields["items"] == 2 and fields["statuses"] == {"ok": 2} and fields["path"] == "/v1/rewards"
    assert fields["duration_ms"] > 0 and fields["body_bytes"] == len(r.request.content)
    for bad in ("has space", "x" * 200, "new\nline"):
        made = small.get("/healthz", headers={"X-Request-ID": bad}).headers["x-request-id"]
        assert made != bad and len(made) == 32


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_log_lines_carry_the_fields(formatter: logging.Formatter) -> None:
    record = logging.LogRecord("reward_server.access", logging.INFO, __file__, 1, "request", (), None)
    record.fields = {"request_id": "r1", "status": 429, "statuses": {"ok": 3}}  # type: ignore[attr-defined]
    line = formatter.format(record)
    if isinstance(formatter, JsonFormatter):
        entry = json.loads(line)
        assert entry["request_id"] == "r1" and entry["status"] == 429 and entry["statuses"] == {"ok": 3}
        assert entry["level"] == "INFO" and entry["logger"] == "reward_server.access"
    else:
        assert 'request_id=r1 status=429 statuses={"ok":3}' in line and " INFO reward_server.access request" in line


def test_transport_client_sees_429_retry_after() -> None:
    """The client waits out a 429's Retry-After and tries again (here: a server that frees up)."""
    answers = iter([429, 200])
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        code = next(answers)
        if code == 429:
            return httpx.Response(429, headers={"Retry-After": "3"}, json={"detail": "full"})
        body = json.loads(request.content)
        return httpx.Response(
            200,
            json={
                "results": [{"id": it["id"], "reward": 1.0, "status": "ok", "components": {}} for it in body["items"]]
            },
        )

    transport = httpx.Client(transport=httpx.MockTransport(handler))
    with RewardClient("http://one", client=transport, retry=RetryPolicy(jitter=0.0)) as rc:  # no jitter: exactly 3 s
        rc._sleep = slept.append  # type: ignore[method-assign]
        [result] = rc.score([RewardItem(id="x", task="math", response="4", ground_truth="4")])
    assert result.reward == 1.0 and slept[-1] == 3.0
