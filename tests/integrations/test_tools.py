"""The sandboxed Python tool in the trainers' own shapes, against a live server: TRL 1.16's ``tools=`` function
and ``environment_factory`` class (their JSON schema as transformers builds it for TRL), and verl 0.9.1's
``BaseTool`` loaded by verl's own tool-config loader."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

from transformers.utils import get_json_schema
from verl.tools.tool_registry import initialize_tools_from_config

from rlvr_client.trl_tools import PythonSession, python_tool
from rlvr_client.verl_tools import SandboxPythonTool
from tests.integrations.conftest import requests_to

CODE_SCHEMA = {"type": "string", "description": "A complete Python program; use print() to show results."}


def test_trl_tool_schema_and_calls(live_server: str) -> None:
    tool = python_tool(timeout_s=2)
    schema = get_json_schema(tool)
    assert schema["function"]["name"] == "python"
    assert schema["function"]["parameters"] == {
        "type": "object",
        "properties": {"code": CODE_SCHEMA},
        "required": ["code"],
    }
    assert tool("print(123456789 * 987654321)") == "121932631112635269"
    assert tool("1 / 0").endswith("ZeroDivisionError: division by zero")
    assert tool("while True: pass").startswith("[timeout: ")
    assert tool("print(x)").endswith("NameError: name 'x' is not defined")  # no state between plain calls


def test_trl_environment_keeps_state_per_rollout(live_server: str) -> None:
    # What GRPOTrainer exposes of an environment: its public methods but `reset`, each with a schema.
    methods = [n for n, _ in inspect.getmembers(PythonSession, predicate=inspect.isfunction) if not n.startswith("_")]
    assert sorted(methods) == ["python", "reset"]
    assert get_json_schema(PythonSession().python)["function"]["parameters"]["required"] == ["code"]
    before = requests_to(live_server, "/v1/tools/python")
    one, two = PythonSession(), PythonSession()
    one.reset(prompt="p1")
    two.reset(prompt="p2")
    assert one.python("x = 6") == "" and two.python("x = 'two'") == ""
    assert (one.python("print(x * 7)"), two.python("print(x)")) == ("42", "two")
    one.reset(prompt="p3")  # a new rollout: a new interpreter
    assert one.python("print(x)").endswith("NameError: name 'x' is not defined")
    assert requests_to(live_server, "/v1/tools/python") - before == 5


def test_verl_tool_through_verls_loader(live_server: str, tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "tools:\n  - class_name: rlvr_client.verl_tools.SandboxPythonTool\n    config: {type: native, timeout_s: 2}\n"
    )
    [tool] = initialize_tools_from_config(str(config))
    assert isinstance(tool, SandboxPythonTool) and tool.name == "code_interpreter"
    assert tool.get_openai_tool_schema().function.parameters.required == ["code"]

    async def rollouts() -> list[str]:
        a, _ = await tool.create()
        b, _ = await tool.create("traj-b")
        texts = []
        for instance, code in (
            (a, "n = 6"),
            (b, "n = 'b'"),
            (a, "print(n * 7)"),
            (b, "print(n)"),
            (a, "import os; os._exit(0)"),
        ):
            response, reward, metrics = await tool.execute(instance, {"code": code})
            assert reward == 0.0 and metrics["status"] == "ok"
            texts.append(response.text)
        response, _, metrics = await tool.execute(a, {"code": "while True: pass"})
        texts.append(f"{metrics['status']} {response.text.startswith('[timeout: ')}")
        response, _, metrics = await tool.execute(a, {"cmd": "1"})
        texts.append(metrics["status"])
        await tool.release(a)
        await tool.release(b)
        return texts

    assert asyncio.run(rollouts()) == ["", "", "42", "b", "", "timeout True", "bad_arguments"]
