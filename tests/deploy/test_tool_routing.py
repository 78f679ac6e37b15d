"""The balancer routes each tool session to one replica: two servers of this checkout behind the rlvr-lb image
running this checkout's nginx template, and sessions opened and used through the one address."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from rlvr_client import RewardClient
from rlvr_client.tools import ToolCall
from tests.conftest import REPO_ROOT
from tests.deploy.conftest import LB_IMAGE, free_ports, require_engine
from tests.reward_server.test_live_server import start_server, wait_ready

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def balancer() -> Iterator[str]:
    require_engine(LB_IMAGE)
    lb, one, two = free_ports(3)
    servers = [start_server(port, {"RLVR_MATH_WORKERS": "1", "RLVR_SANDBOX_POOL_SIZE": "2"}) for port in (one, two)]
    name = f"rlvr-tool-routing-{lb}"
    try:
        for port, proc in zip((one, two), servers, strict=True):
            wait_ready(f"http://127.0.0.1:{port}", proc, timeout_s=120)
        template = REPO_ROOT / "docker/lb/nginx.conf.template"
        started = subprocess.run(
            [
                *("docker", "run", "-d", "--rm", "--name", name, "--network", "host", "--user", "10001:10001"),
                *("-e", f"RLVR_LB_LISTEN=127.0.0.1:{lb}", "-e", f"RLVR_LB_UPSTREAMS=127.0.0.1:{one} 127.0.0.1:{two}"),
                *("-v", f"{template}:/opt/rlvr-lb/nginx.conf.template:ro", LB_IMAGE),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        url = f"http://127.0.0.1:{lb}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the balancer did not come up"
            time.sleep(0.2)
        yield url
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=20)


def test_each_session_stays_on_one_replica(balancer: str) -> None:
    with RewardClient(balancer) as client:
        opened = [client.run_tools([ToolCall(f"x = {i}", f"routed-{i}")])[0] for i in range(12)]
        assert all(r.status == "ok" for r in opened), opened
        instances = {r.session_id.split("@")[1] for r in opened if r.session_id}
        assert len(instances) == 2  # the sessions are spread over both replicas...
        # ...and every later call of each reaches its own, in an order a round-robin or least-connections balancer
        # would send to the other replica for half of them.
        order = [*range(0, 12, 2), *range(1, 12, 2)]
        for turn in range(2):
            for i in order:
                [r] = client.run_tools([ToolCall("x += 1\nprint(x)", opened[i].session_id)])
                assert (r.status, r.stdout) == ("ok", f"{i + turn + 1}\n"), r
