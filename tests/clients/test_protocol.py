"""The wire contract, :mod:`rlvr_client.protocol`: standard library only, and the one definition the server's
schemas and the client share."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_client import protocol

CLIENTS = Path(__file__).resolve().parents[2] / "clients"

_IMPORTS_OUTSIDE_STDLIB = """
import json, sys
before = set(sys.modules)  # what the interpreter's site set-up loaded (.pth finders)
sys.path.insert(0, sys.argv[1])
import rlvr_client.protocol, rlvr_client.protocol.openrlhf, rlvr_client.protocol.slime  # noqa: E401
import rlvr_client.protocol.trl, rlvr_client.protocol.verl  # noqa: E401
roots = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps(sorted(roots - set(sys.stdlib_module_names) - {"rlvr_client"})))
"""


def test_the_protocol_imports_nothing_outside_the_standard_library() -> None:
    # -I: no PYTHONPATH, no user site, no current directory; only clients/ is added, so httpx (installed in this
    # interpreter's site-packages) would show up if the contract imported it.
    out = subprocess.run(
        [sys.executable, "-I", "-c", _IMPORTS_OUTSIDE_STDLIB, str(CLIENTS)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize(
    ("schema", "contract"),
    [
        ("RewardItem", protocol.RewardItem),
        ("RewardResult", protocol.RewardResult),
        ("ComponentResult", protocol.ComponentResult),
    ],
    ids=["item", "result", "component"],
)
def test_the_servers_schemas_have_the_contracts_fields(schema: str, contract: type) -> None:
    from reward_server.schemas import rewards

    assert set(getattr(rewards, schema).model_fields) == {f.name for f in dataclasses.fields(contract)}


def test_the_step_schema_has_the_contracts_fields() -> None:
    from reward_server.schemas.steps import StepResult

    assert set(StepResult.model_fields) == {f.name for f in dataclasses.fields(protocol.StepScore)}


def test_every_status_the_server_writes_is_in_the_vocabulary() -> None:
    from reward_server.verifiers.math import MathStatus
    from sandbox.types import Status as SandboxStatus

    # The math verifier's statuses are components' statuses as they are; of the sandbox's, a code item's
    # accuracy carries only the infrastructure ones (a program's own failure is a score, status ok).
    written = {str(s) for s in MathStatus} | {str(s) for s in SandboxStatus if s.is_infrastructure}
    assert written <= protocol.STATUSES
    assert set(protocol.STATUS_MEANINGS) == protocol.STATUSES


def test_a_result_converts_to_the_contract_without_json() -> None:
    from reward_server.schemas.rewards import ComponentResult, RewardResult
    from reward_server.schemas.steps import StepResult

    result = RewardResult(
        id="q-0",
        reward=1.0,
        status="ok",
        components={"accuracy": ComponentResult(score=1.0, weight=1.0, status="ok", info={"x": 1})},
        steps=[StepResult(start=0, end=3, score=None, status="no_claim")],
    )
    assert result.to_protocol() == protocol.RewardResult.from_json(result.model_dump())
