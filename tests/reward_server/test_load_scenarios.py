"""Issue 24's load scenarios, scaled down, on a real server: counts of items lost and batches raised, never times.

The scenarios are :mod:`benchmarks.scenarios`' (which prints the full-size figures and a ratio against another
checkout). Each runs on a fresh server with that module's settings: 2 math workers, a 1 s item limit, a 3 s request
budget (as small against these batches as 60 s was against the issue's).
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks._serve import server_process
from benchmarks.scenarios import SCENARIO_3_ENV, SERVER_ENV, scenario_1, scenario_2, scenario_3

pytestmark = pytest.mark.slow


def test_slow_items_lose_no_normal_item_of_their_batch() -> None:
    # 64 items, 24 of them stuck until their own 1 s limit: on 2 workers (and 2 extra ones for slow items) they
    # hold the pool for 6 s, past the 3 s budget. main before issue 24 lost all 40 normal items here.
    async def run() -> None:
        async with server_process(SERVER_ENV) as (_, url):
            s1 = await scenario_1(url, groups=8, slow=24, alone_s=2.0)
        assert s1.normal_items == 40
        assert s1.normal_lost == 0
        assert s1.other_during_items_s > 0  # the second client was served meanwhile

    asyncio.run(run())


def test_long_batches_are_scored_whole_or_refused_at_the_door() -> None:
    # 3 x 24 completions of 200k characters: 480 work units each, 1,440 against a bound of 1,200.
    async def run() -> None:
        async with server_process(SERVER_ENV) as (_, url):
            s2 = await scenario_2(url, batches=3, items=24)
        assert s2.other == {}
        assert s2.items_lost == 0
        assert s2.scored_whole + s2.refused_at_door == 3
        assert s2.scored_whole >= 1

    asyncio.run(run())


def test_the_projects_client_raises_no_batch_in_a_retry_storm() -> None:
    # 60 batches of 32 at 60 a second into a queue of 64 items (two batches): some are refused and retried.
    async def run() -> None:
        async with server_process(SCENARIO_3_ENV) as (_, url):
            s3 = await scenario_3(url, batches=60, rate=60.0, size=32)
        assert s3.raised == 0

    asyncio.run(run())
