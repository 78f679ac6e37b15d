"""Property-based API tests: schemathesis generates requests from the server's own ``/openapi.json`` and sends
them to a real server process. No answer may be a 5xx, and every answer must match the schema the server
publishes for it (body and content type).

Bounded for CI: ``RLVR_SCHEMATHESIS_EXAMPLES`` examples per operation (default 20, about 180 requests over the
server's operations). A hang or a crash on a generated input would show as a 5xx or a timeout.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

schemathesis = pytest.importorskip("schemathesis")  # the dev extra has it; CI installs the dev extra
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
)

from reward_server.app import create_app  # noqa: E402
from reward_server.settings import Settings  # noqa: E402
from tests.reward_server.serverproc import ServerProcess  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("RLVR_SCHEMATHESIS_EXAMPLES", "20"))
KEY = "schemathesis-key-0123456789"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Short per-item limits, so a generated completion that makes sympy work hard costs seconds, not minutes.
    env = {"RLVR_MATH_TIMEOUT_S": "2", "RLVR_SANDBOX_TIME_S": "2", "RLVR_API_KEYS": KEY}
    server = ServerProcess(tmp_path_factory.mktemp("schemathesis") / "server.log", env)
    try:
        yield server
    finally:
        server.stop()


# The schema the server serves at /openapi.json, built without starting anything (the app's lifespan is what
# starts its pools); the requests go to the live server. (schemathesis's lazy fixture loader does not work
# with pytest 9.)
schema = schemathesis.openapi.from_dict(create_app(Settings(api_keys=KEY)).openapi())


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
def test_no_5xx_and_answers_match_the_schema(case: object, live: ServerProcess) -> None:
    case.call_and_validate(  # type: ignore[attr-defined]
        base_url=live.url,
        headers={"Authorization": f"Bearer {KEY}"},
        checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        timeout=120,
    )
