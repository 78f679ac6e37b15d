"""The client's retries: a total deadline rather than a count of attempts, ``Retry-After`` honoured, full jitter,
and a log line per wait. A fake clock that the fake sleep advances: no test waits."""

from __future__ import annotations

import logging

import httpx
import pytest

from rlvr_client.client import ITEMS_HEADER, AsyncRewardClient, RetryPolicy, RewardClient, RewardServerError
from tests.clients.test_client import FakeServer, _items


class Clock:
    """Monotonic seconds that move only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.slept.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def _client(server: FakeServer, retry: RetryPolicy) -> tuple[RewardClient, Clock]:
    client = RewardClient("http://a", client=httpx.Client(transport=httpx.MockTransport(server)), retry=retry)
    clock = Clock()
    client._clock = clock
    client._sleep = clock.sleep
    return client, clock


def test_the_defaults_retry_by_deadline_alone() -> None:
    policy = RetryPolicy()
    assert (policy.deadline_s, policy.max_retries, policy.jitter) == (300.0, None, 1.0)


def test_many_429s_then_200_succeed_inside_the_deadline() -> None:
    # Eight refusals, each asking for 3 s: 24 s of waiting, inside a 30 s deadline. A count of 5 retries (the old
    # default) would have raised after the sixth attempt.
    server = FakeServer([429] * 8)
    server.headers = {"Retry-After": "3"}
    client, clock = _client(server, RetryPolicy(deadline_s=30, jitter=0.0))
    results = client.score(_items(2))
    assert [r.reward for r in results] == [0.25, 0.25]
    assert clock.slept == [3.0] * 8
    assert clock.now == 24.0
    assert len(server.requests) == 9


def test_a_retry_after_past_the_deadline_raises_at_once_naming_it() -> None:
    # Attempts at 0 s and 4 s; at 8 s the server asks for 4 s more, with 2 s left of the 10 s: no sleep, an error.
    server = FakeServer([429] * 10)
    server.headers = {"Retry-After": "4"}
    client, clock = _client(server, RetryPolicy(deadline_s=10, jitter=0.0))
    with pytest.raises(RewardServerError) as err:
        client.score(_items(1))
    message = str(err.value)
    assert "after 3 attempts in 8.0 s (HTTP 429)" in message
    assert "wait 4 s (Retry-After), past the retry deadline of 10 s (RetryPolicy.deadline_s), 2.0 s from now" in message
    assert err.value.status_code == 429
    assert clock.slept == [4.0, 4.0]


def test_the_last_wait_is_cut_to_the_deadline_and_then_it_raises() -> None:
    # No Retry-After (connection refused): windows of 1, 2, 4 and 8 s without jitter. The fourth wait is cut to
    # the 3 s left of the 10 s deadline; the fifth attempt fails at 10 s, with nothing left.
    server = FakeServer([httpx.ConnectError("refused")] * 10)
    client, clock = _client(server, RetryPolicy(deadline_s=10, backoff_s=1.0, jitter=0.0))
    with pytest.raises(RewardServerError, match=r"the retry deadline of 10 s \(RetryPolicy.deadline_s\) has passed"):
        client.score(_items(1))
    assert clock.slept == [1.0, 2.0, 4.0, 3.0]
    assert len(server.requests) == 5


def test_max_retries_still_caps_when_set() -> None:
    server = FakeServer([503] * 10)
    client, clock = _client(server, RetryPolicy(deadline_s=1000, max_retries=2, backoff_s=1.0, jitter=0.0))
    with pytest.raises(RewardServerError, match=r"after 3 attempts in 3.0 s \(HTTP 503\); no retries left"):
        client.score(_items(1))
    assert clock.slept == [1.0, 2.0]


def test_full_jitter_draws_each_wait_from_its_window() -> None:
    # seed 7: the first draws of random.Random(7) are 0.32383..., 0.15084..., 0.65093..., 0.07243...; a wait is
    # window * (1 - draw), over windows of 1, 2, 4 and 8 s.
    server = FakeServer([503] * 4)
    client, clock = _client(server, RetryPolicy(backoff_s=1.0, seed=7))
    client.score(_items(1))
    assert clock.slept == pytest.approx(
        [
            1 * (1 - 0.32383276483316237),
            2 * (1 - 0.15084917392450192),
            4 * (1 - 0.6509344730398537),
            8 * (1 - 0.07243628666754276),
        ]
    )


def test_jitter_spreads_clients_refused_together_over_retry_after_to_twice_it() -> None:
    # Four clients told "Retry-After: 4" at once come back at 4 + 4 * draw, the first draw of random.Random(seed).
    first_draws = [0.8444218515250481, 0.13436424411240122, 0.9560342718892494, 0.23796462709189137]
    waits = []
    for seed in range(4):
        server = FakeServer([429])
        server.headers = {"Retry-After": "4"}
        client, clock = _client(server, RetryPolicy(seed=seed))
        client.score(_items(1))
        waits.extend(clock.slept)
    assert waits == pytest.approx([4 + 4 * d for d in first_draws])
    assert waits == pytest.approx([7.3776874061, 4.5374569764, 7.8241370876, 4.9518585084])


def test_each_wait_is_logged_with_the_attempt_the_status_and_the_wait(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeServer([429, httpx.ConnectError("refused")])
    server.headers = {"Retry-After": "2"}
    client, _ = _client(server, RetryPolicy(deadline_s=60, backoff_s=1.0, jitter=0.0))
    with caplog.at_level(logging.INFO, "rlvr_client"):
        client.score(_items(1))
    lines = [r.getMessage() for r in caplog.records if r.name == "rlvr_client"]
    assert lines == [
        "reward server http://a: attempt 1 got HTTP 429; retrying in 2.00 s (Retry-After: 2 s; 60.0 s left of the "
        "60 s retry deadline)",
        "reward server http://a: attempt 2 got ConnectError; retrying in 2.00 s (Retry-After: none; 58.0 s left of "
        "the 60 s retry deadline)",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "rlvr_client")


def test_every_request_declares_its_item_count() -> None:
    server = FakeServer()
    client, _ = _client(server, RetryPolicy())
    client.max_batch_items = 3
    client.score(_items(5))
    assert [r.headers[ITEMS_HEADER] for r in server.requests] == ["3", "2"]


async def test_the_async_client_retries_by_the_same_deadline() -> None:
    server = FakeServer([429] * 6)
    server.headers = {"Retry-After": "5"}
    clock = Clock()
    client = AsyncRewardClient(
        "http://a",
        client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
        retry=RetryPolicy(deadline_s=31, jitter=0.0),
    )
    client._clock = clock
    client._sleep = clock.async_sleep
    assert [r.reward for r in await client.score(_items(1))] == [0.25]
    assert clock.slept == [5.0] * 6
    server.script = [429] * 7
    clock.slept.clear()
    with pytest.raises(RewardServerError, match="past the retry deadline of 31 s"):
        await client.score(_items(1))
    assert clock.slept == [5.0] * 6  # at 30 s, 1 s left: the seventh wait of 5 s is not begun


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deadline_s": -1}, "deadline_s"),
        ({"deadline_s": float("nan")}, "deadline_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"jitter": 1.5}, "jitter"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
