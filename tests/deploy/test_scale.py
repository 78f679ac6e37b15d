"""Scale-out: docker-compose.scale.yml runs two replicas behind nginx; requests reach both, and the balancer
keeps answering when one replica stops."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.conftest import LB_IMAGE, SCALE_FILE, SERVER_IMAGE, Stack, compose_stack, free_ports, require_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ITEM = {"id": "q-0", "response": "The answer is $\\boxed{\\frac{1}{2}}$.", "ground_truth": "0.5"}


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    """The balancer's and each replica's port on 127.0.0.1."""
    lb, one, two = free_ports(3)
    return {"lb": lb, "replica-1": one, "replica-2": two}


@pytest.fixture(scope="module")
def replicas(ports: dict[str, int]) -> dict[str, int]:
    return {name: port for name, port in ports.items() if name != "lb"}


@pytest.fixture(scope="module")
def stack(ports: dict[str, int], replicas: dict[str, int]) -> Iterator[Stack]:
    require_engine(SERVER_IMAGE, LB_IMAGE)
    lb = ports["lb"]
    env = {
        "RLVR_HOST": "127.0.0.1",
        "RLVR_PORT": str(lb),
        "RLVR_REPLICA_1_PORT": str(replicas["replica-1"]),
        "RLVR_REPLICA_2_PORT": str(replicas["replica-2"]),
        "RLVR_MATH_WORKERS": "1",
        "RLVR_SANDBOX_POOL_SIZE": "1",
    }
    with compose_stack([SCALE_FILE], ["replica-1", "replica-2", "lb"], env, f"http://127.0.0.1:{lb}") as s:
        yield s


def rewards_served(port: int) -> float:
    """How many ``POST /v1/rewards`` a replica answered with 200, from its Prometheus counter."""
    for family in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics").text):
        for sample in family.samples:
            if sample.name == "rlvr_requests_total" and sample.labels == {"route": "/v1/rewards", "code": "200"}:
                return sample.value
    return 0.0


def test_requests_reach_both_replicas(stack: Stack, replicas: dict[str, int]) -> None:
    before = {name: rewards_served(port) for name, port in replicas.items()}
    with httpx.Client(base_url=stack.url, timeout=60.0) as client:
        for _ in range(8):
            r = client.post("/v1/rewards", json={"items": [ITEM]})
            assert r.status_code == 200, r.text
            assert r.json()["results"][0]["reward"] == 1.0
    served = {name: rewards_served(port) - before[name] for name, port in replicas.items()}
    assert sum(served.values()) == 8
    assert all(n >= 1 for n in served.values()), served


def test_balancer_survives_a_replica_stopping(stack: Stack) -> None:
    stopped = stack.compose("stop", "--timeout", "10", "replica-1")
    assert stopped.returncode == 0, stopped.stderr
    try:
        with httpx.Client(base_url=stack.url, timeout=60.0) as client:
            codes = [client.post("/v1/rewards", json={"items": [ITEM]}).status_code for _ in range(6)]
        assert codes == [200] * 6
    finally:
        started = stack.compose("start", "replica-1")
        assert started.returncode == 0, started.stderr
