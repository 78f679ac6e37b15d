"""The reward server's HTTP client, against ``httpx.MockTransport`` servers that misbehave on purpose."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from rlvr_client.client import (
    AsyncRewardClient,
    RetryPolicy,
    RewardClient,
    RewardItem,
    RewardServerError,
    _parse_retry_after,
)
from rlvr_client.trl import reward_function

NO_JITTER = RetryPolicy(max_retries=3, backoff_s=0.5, max_backoff_s=10.0, jitter=0.0)


def _verdict(item: dict[str, Any]) -> dict[str, Any]:
    """A stand-in scorer: right when the response ends with the ground truth; 'bad' cannot be parsed."""
    if item.get("ground_truth") == "bad":
        acc = {"score": None, "weight": 1.0, "status": "invalid_ground_truth", "detail": "unparsable", "info": {}}
        return {"id": item["id"], "reward": None, "status": "invalid_ground_truth", "components": {"accuracy": acc}}
    score = 1.0 if item["response"].strip().endswith(str(item.get("ground_truth"))) else 0.0
    acc = {"score": score, "weight": 1.0, "status": "ok", "detail": None, "info": {}}
    fmt = {"score": 0.5, "weight": 0.5, "status": "ok", "detail": None, "info": {}}
    return {"id": item["id"], "reward": score + 0.25, "status": "ok", "components": {"accuracy": acc, "format": fmt}}


class FakeServer:
    """Records requests; ``script`` gives, per call, a status code or an exception to raise before answering."""

    def __init__(self, script: list[int | Exception] | None = None, *, reverse: bool = False) -> None:
        self.script = list(script or [])
        self.reverse = reverse
        self.requests: list[httpx.Request] = []
        self.headers: dict[str, str] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script.pop(0) if self.script else 200
        if isinstance(step, Exception):
            raise step
        if step != 200:
            return httpx.Response(step, headers=self.headers, json={"detail": "busy"})
        body = json.loads(request.content)
        results = [_verdict(item) for item in body["items"]]
        if self.reverse:
            results.reverse()
        return httpx.Response(200, json={"results": results})

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def _items(n: int, truth: str = "4") -> list[RewardItem]:
    return [RewardItem(id=f"q-{i}", task="math", response=f"so {i}", ground_truth=truth) for i in range(n)]


def _client(server: Callable[[httpx.Request], httpx.Response], urls: Any = "http://a", **kw: Any) -> RewardClient:
    client = RewardClient(urls, client=httpx.Client(transport=httpx.MockTransport(server)), retry=NO_JITTER, **kw)
    client._sleep = lambda s: None
    return client


def test_results_come_back_in_request_order_matched_by_id() -> None:
    server = FakeServer(reverse=True)
    items = [*_items(3), RewardItem(id="right", task="math", response="= 4", ground_truth="4")]
    results = _client(server).score(items, components={"accuracy": 1.0, "format": 0.5})
    assert [r.id for r in results] == ["q-0", "q-1", "q-2", "right"]
    assert [r.reward for r in results] == [0.25, 0.25, 0.25, 1.25]
    assert results[3].components["accuracy"].score == 1.0
    assert results[3].components["format"].weight == 0.5
    body = server.bodies()[0]
    assert body["components"] == {"accuracy": 1.0, "format": 0.5}
    assert body["items"][3] == {"id": "right", "task": "math", "response": "= 4", "ground_truth": "4"}


def test_null_reward_stays_none_with_its_status() -> None:
    [result] = _client(FakeServer()).score(_items(1, truth="bad"))
    assert result.reward is None
    assert result.status == "invalid_ground_truth"
    assert result.components["accuracy"].score is None


@pytest.mark.parametrize(
    ("results", "reason"),
    [
        ([{"id": "q-0", "reward": 1.0, "status": "ok", "components": {}}], "one result missing"),
        (
            [
                {"id": "q-0", "reward": 1.0, "status": "ok", "components": {}},
                {"id": "zzz", "reward": 1.0, "status": "ok", "components": {}},
            ],
            "an id the request did not have",
        ),
        (
            [
                {"id": "q-0", "reward": 1.0, "status": "ok", "components": {}},
                {"id": "q-0", "reward": 0.0, "status": "ok", "components": {}},
            ],
            "the same id twice",
        ),
    ],
)
def test_mismatched_ids_are_an_error_not_a_guess(results: list[dict[str, Any]], reason: str) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json={"results": results}))
    client = RewardClient("http://a", client=httpx.Client(transport=transport))
    with pytest.raises(RewardServerError, match="refusing to guess"):
        client.score(_items(2))


def test_malformed_result_is_an_error() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json={"results": [{"id": "q-0"}]}))
    with pytest.raises(RewardServerError, match="malformed"):
        RewardClient("http://a", client=httpx.Client(transport=transport)).score(_items(1))


_OK_SECOND = '{"id": "q-1", "reward": 1.0, "status": "ok", "components": {}}'


@pytest.mark.parametrize(
    ("first", "message"),
    [
        # Python's json reads NaN/Infinity: NaN would pass as "not scoreable" with status ok, inf would make every
        # advantage of its group NaN.
        ('{"id": "q-0", "reward": NaN, "status": "ok"}', "reward must be finite"),
        ('{"id": "q-0", "reward": Infinity, "status": "ok"}', "reward must be finite"),
        ('{"id": "q-0", "reward": -Infinity, "status": "ok"}', "reward must be finite"),
        ('{"id": "q-0", "reward": "0.5", "status": "ok"}', "reward must be a number"),
        ('{"id": "q-0", "reward": true, "status": "ok"}', "reward must be a number"),
        (
            '{"id": "q-0", "reward": 1.0, "status": "ok", "components": {"accuracy": {"score": NaN, "status": "ok"}}}',
            "score must be finite",
        ),
        (
            '{"id": "q-0", "reward": 1.0, "status": "ok", "components": {"format": {"score": 1, "weight": "x", '
            '"status": "ok"}}}',
            "weight must be a number",
        ),
        # The contract: a number only with status ok. A 0 with "timeout" is a failure passed off as a verdict.
        ('{"id": "q-0", "reward": 0.0, "status": "timeout"}', "reward 0.0 with status 'timeout'"),
        ('{"id": "q-0", "reward": 0.0, "status": "sandbox_error"}', "with status 'sandbox_error'"),
    ],
)
def test_rewards_that_are_not_finite_numbers_with_status_ok_are_refused(first: str, message: str) -> None:
    body = f'{{"results": [{first}, {_OK_SECOND}]}}'.encode()
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    with pytest.raises(RewardServerError, match=message):
        RewardClient("http://a", client=httpx.Client(transport=transport)).score(_items(2))


def test_a_null_reward_with_status_ok_is_still_null() -> None:
    body = {"results": [{"id": "q-0", "reward": None, "status": "ok"}, json.loads(_OK_SECOND)]}
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=body))
    results = RewardClient("http://a", client=httpx.Client(transport=transport)).score(_items(2))
    assert [r.reward for r in results] == [None, 1.0]


def test_repeated_ids_are_refused_before_sending() -> None:
    server = FakeServer()
    with pytest.raises(ValueError, match="unique"):
        _client(server).score([*_items(2), *_items(1)])
    assert server.requests == []


@pytest.mark.parametrize("code", [429, 502, 503, 504])
def test_retryable_status_is_retried_with_the_same_ids_honouring_retry_after(code: int) -> None:
    server = FakeServer([code, code])
    server.headers = {"Retry-After": "2"}
    client = _client(server)
    slept: list[float] = []
    client._sleep = slept.append
    results = client.score(_items(3))
    assert [r.id for r in results] == ["q-0", "q-1", "q-2"]
    assert [s for s in slept if s > 0] == [2.0, 2.0]
    bodies = server.bodies()
    assert len(bodies) == 3
    assert bodies[0] == bodies[1] == bodies[2]  # idempotent: every attempt carries the same ids


def test_retry_after_is_capped_by_max_backoff() -> None:
    server = FakeServer([503])
    server.headers = {"Retry-After": "86400"}
    client = _client(server)
    slept: list[float] = []
    client._sleep = slept.append
    client.score(_items(1))
    assert max(slept) == NO_JITTER.max_backoff_s


def test_exponential_backoff_without_retry_after() -> None:
    server = FakeServer([httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), 503])
    client = _client(server)
    slept: list[float] = []
    client._sleep = slept.append
    client.score(_items(1))
    assert [s for s in slept if s > 0] == [0.5, 1.0, 2.0]


def test_gives_up_after_max_retries() -> None:
    server = FakeServer([httpx.ConnectError("refused")] * 10)
    with pytest.raises(RewardServerError, match="after 4 attempts") as err:
        _client(server).score(_items(1))
    assert err.value.status_code is None
    assert len(server.requests) == NO_JITTER.max_retries + 1


@pytest.mark.parametrize(("code", "hint"), [(422, "answered 422"), (413, "max_batch_items"), (500, "answered 500")])
def test_client_errors_are_not_retried(code: int, hint: str) -> None:
    server = FakeServer([code])
    with pytest.raises(RewardServerError, match=hint) as err:
        _client(server).score(_items(1))
    assert err.value.status_code == code
    assert len(server.requests) == 1


def test_failed_server_is_avoided_on_the_retry() -> None:
    down = FakeServer([httpx.ConnectError("refused")] * 10)
    up = FakeServer()

    def route(request: httpx.Request) -> httpx.Response:
        return down(request) if request.url.host == "down" else up(request)

    client = _client(route, urls=["http://down", "http://up"])
    for _ in range(3):
        assert [r.reward for r in client.score(_items(1))] == [0.25]
    assert len(up.requests) == 3
    assert len(down.requests) == 1  # after one connection error it is left alone for its cooldown


def test_requests_are_balanced_round_robin() -> None:
    seen: list[str] = []
    server = FakeServer()

    def route(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return server(request)

    client = _client(route, urls=["http://a:1/", "http://b:2", "http://c:3"])
    for _ in range(6):
        client.score(_items(1))
    assert seen == ["a", "b", "c", "a", "b", "c"]
    assert client.base_urls == ["http://a:1", "http://b:2", "http://c:3"]


def test_large_batches_are_split() -> None:
    server = FakeServer()
    results = _client(server, max_batch_items=2).score(_items(5))
    assert [r.id for r in results] == [f"q-{i}" for i in range(5)]
    assert [len(b["items"]) for b in server.bodies()] == [2, 2, 1]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("-4", 0.0),  # a negative delay means now
        ("soon", None),  # unparsable: fall back to backoff
        ("", None),
        ("nan", None),
    ],
)
def test_parse_retry_after_seconds(header: str, expected: float | None) -> None:
    assert _parse_retry_after(header) == expected


def test_parse_retry_after_http_date() -> None:
    header = email.utils.formatdate(time.time() + 30, usegmt=True)
    got = _parse_retry_after(header)
    assert got is not None and 28 <= got <= 31


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="URL"):
        RewardClient([])
    with pytest.raises(ValueError, match="timeout_s"):
        RewardClient("http://a", timeout_s=0)
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)


def test_wait_ready_polls_until_200() -> None:
    answers = [503, 503, 200]
    transport = httpx.MockTransport(lambda r: httpx.Response(answers.pop(0)))
    client = RewardClient("http://a", client=httpx.Client(transport=transport))
    client._sleep = lambda s: None
    client.wait_ready(timeout_s=5)
    assert answers == []


def _ready_unless_b(request: httpx.Request) -> httpx.Response:
    if request.url.host == "b":
        raise httpx.ConnectError("connection refused")
    return httpx.Response(200)


def test_wait_ready_with_one_server_down() -> None:
    client = RewardClient(["http://a", "http://b"], client=httpx.Client(transport=httpx.MockTransport(_ready_unless_b)))
    client._sleep = lambda s: time.sleep(0.01)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"reward server\(s\) http://b not ready after 0.2 s"):
        client.wait_ready(timeout_s=0.2)
    assert client.wait_ready(timeout_s=0.2, require_all=False) == ["http://a"]
    assert time.monotonic() - start < 2.0  # polled every server each round, not one after the other


def test_wait_ready_polls_every_server_in_each_round() -> None:
    # b comes up on its third poll; a is ready at once. Both must be seen ready.
    polls: dict[str, int] = {"a": 0, "b": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        polls[request.url.host] += 1
        return httpx.Response(200 if request.url.host == "a" or polls["b"] >= 3 else 503)

    client = RewardClient(["http://a", "http://b"], client=httpx.Client(transport=httpx.MockTransport(handler)))
    client._sleep = lambda s: None
    assert client.wait_ready(timeout_s=5) == ["http://a", "http://b"]
    assert polls == {"a": 1, "b": 3}  # a ready server is not polled again


def test_no_server_ready_is_an_error_even_without_require_all() -> None:
    down = httpx.MockTransport(lambda r: httpx.Response(503))
    client = RewardClient(["http://a", "http://b"], client=httpx.Client(transport=down))
    client._sleep = lambda s: None
    with pytest.raises(TimeoutError, match="http://a, http://b not ready"):
        client.wait_ready(timeout_s=0.05, require_all=False)


def test_connecting_gets_a_short_timeout() -> None:
    # A server that drops packets must not hold every attempt for the whole read timeout.
    timeout = RewardClient("http://a", timeout_s=120)._timeout
    assert (timeout.connect, timeout.read) == (10.0, 120)
    assert RewardClient("http://a", timeout_s=3)._timeout.connect == 3


# ----------------------------------------------------------------------------------------------------------- async


async def test_async_client_splits_and_spreads_over_servers() -> None:
    seen: list[str] = []
    server = FakeServer(reverse=True)

    async def route(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return server(request)

    client = AsyncRewardClient(
        ["http://a", "http://b"],
        client=httpx.AsyncClient(transport=httpx.MockTransport(route)),
        max_batch_items=2,
    )
    results = await client.score(_items(4))
    assert [r.id for r in results] == ["q-0", "q-1", "q-2", "q-3"]
    assert sorted(seen) == ["a", "b"]


async def test_async_client_retries_503_with_retry_after() -> None:
    server = FakeServer([503])
    server.headers = {"Retry-After": "1"}
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    client = AsyncRewardClient(
        "http://a", client=httpx.AsyncClient(transport=httpx.MockTransport(server)), retry=NO_JITTER
    )
    client._sleep = fake_sleep
    results = await client.score(_items(2))
    assert [r.reward for r in results] == [0.25, 0.25]
    assert [s for s in slept if s > 0] == [1.0]


# --------------------------------------------------------------------------------------------- TRL reward functions


def test_trl_reward_function_contract() -> None:
    server = FakeServer()
    fn = reward_function(_client(server), components={"accuracy": 1.0, "format": 0.5})
    completions = ["so 4", [{"role": "assistant", "content": "it is 5"}], "x"]
    rewards = fn(
        completions,
        prompts=["p1", "p2", "p3"],
        ground_truth=["4", "5", "bad"],
        completion_ids=[[1, 2], [3], [4, 5, 6]],
        trainer_state=None,
    )
    assert rewards == [1.25, 1.25, None]
    assert fn.__name__ == "rlvr_reward"
    [body] = server.bodies()
    assert body["items"][1]["response"] == "it is 5"
    assert [i["num_tokens"] for i in body["items"]] == [2, 1, 3]
    assert len({i["id"] for i in body["items"]}) == 3


def test_trl_reward_function_per_component_and_columns() -> None:
    server = FakeServer()
    fn = reward_function(_client(server), component="format", ground_truth_column="solution")
    assert fn(["a", "b"], solution=["1", "2"], task=["math", "math"]) == [0.5, 0.5]
    assert fn.__name__ == "rlvr_format"


def test_trl_reward_function_names_the_missing_column() -> None:
    fn = reward_function(_client(FakeServer()))
    with pytest.raises(KeyError, match="ground_truth_column"):
        fn(["a"], answer=["1"])


# ------------------------------------------------------------------------------------------ against the real app


def test_client_speaks_the_real_apps_contract() -> None:
    """The client against the app itself (in process, through FastAPI's TestClient): field names, statuses."""
    from fastapi.testclient import TestClient

    from reward_server.app import create_app
    from reward_server.settings import Settings

    items = [
        RewardItem(
            id="g0-c0",
            task="math",
            response="<think>6 * 7 = 42</think>\n<answer>42</answer>",
            ground_truth="42",
            group_id="g0",
            prompt="What is 6 times 7?",
            num_tokens=12,
        ),
        RewardItem(id="g0-c1", task="math", response="<think>6 + 7</think>\n<answer>13</answer>", ground_truth="42"),
        RewardItem(id="g1-c0", task="math", response="<think>x</think> 5", ground_truth="???"),  # no value
    ]
    with TestClient(create_app(Settings(math_workers=1))) as app:
        client = RewardClient("http://testserver", client=app)
        client.wait_ready(timeout_s=60)
        results = client.score(items, components={"accuracy": 1.0, "format": 0.5})
        with pytest.raises(RewardServerError, match="422") as err:
            client.score(items, components={"acuracy": 1.0})
    assert [r.id for r in results] == ["g0-c0", "g0-c1", "g1-c0"]
    assert [r.components["accuracy"].score for r in results[:2]] == [1.0, 0.0]
    assert results[0].reward == 1.5 and results[0].components["format"].weight == 0.5
    assert results[2].reward is None and results[2].status == "invalid_ground_truth"
    assert "acuracy" in str(err.value)  # the 422 names the bad component


def test_step_rewards_travel_both_ways() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        item = json.loads(request.content)["items"][0]
        seen.append(item)
        steps = [
            {"start": 0, "end": 9, "score": 1.0, "status": "ok", "detail": None},
            {"start": 10, "end": 14, "score": None, "status": "no_claim", "detail": "nothing to check"},
        ]
        result = {"id": item["id"], "reward": 1.0, "status": "ok", "components": {}, "steps": steps}
        return httpx.Response(200, json={"results": [result]})

    item = RewardItem(id="q-0", task="math", response="1 + 1 = 2\ndone", ground_truth="2", steps={"separator": "\n"})
    [result] = RewardClient("http://a", client=httpx.Client(transport=httpx.MockTransport(handler))).score([item])
    assert seen[0]["steps"] == {"separator": "\n"}
    assert result.steps is not None
    assert [(s.start, s.end, s.score, s.status) for s in result.steps] == [
        (0, 9, 1.0, "ok"),
        (10, 14, None, "no_claim"),
    ]
    plain = RewardItem(id="q-1", task="math", response="x", ground_truth="2")
    assert "steps" not in plain.to_json()


def test_a_step_score_that_is_not_a_number_is_malformed() -> None:
    body = {
        "results": [
            {
                "id": "q-0",
                "reward": 1.0,
                "status": "ok",
                "steps": [{"start": 0, "end": 1, "score": "1", "status": "ok"}],
            }
        ]
    }
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=body))
    with pytest.raises(RewardServerError, match="malformed"):
        RewardClient("http://a", client=httpx.Client(transport=transport)).score(_items(1))
