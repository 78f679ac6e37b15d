"""Tool calls in text, results rendered back, the HTTP client against a stub of the contract, and the config."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.trainer.tools_helpers import StubToolServer
from trainer.config import ConfigError, config_from_dict
from trainer.tools.client import HttpToolClient, ToolRequest, ToolResult, ToolServerError
from trainer.tools.formats import CodeBlockFormat, QwenJsonFormat, make_format, result_text

# ------------------------------------------------------------------------------------------------------ formats


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Let me compute.\n```python\nx = 6 * 7\nprint(x)\n```", "x = 6 * 7\nprint(x)"),
        ("```py\nprint(1)\n```\n", "print(1)"),
        ("a\n```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```  \n", "print(2)"),
    ],
)
def test_code_block_call_at_the_end_is_found(text: str, code: str) -> None:
    call = CodeBlockFormat().find_call(text)
    assert call is not None and call.code == code and call.error is None


@pytest.mark.parametrize(
    "text",
    [
        "```python\nprint(1)",  # not closed yet
        "```python\nprint(1)\n```\nThe answer is 1.",  # a call, but not at the end
        "```\nplain fence\n```",  # not a python block
        "```python\nprint(1)\n```\n```text\nx\n```",  # the last fence closes another block
        "```python",  # just opened: "```python" ends in neither "\n```" nor a call
    ],
)
def test_code_block_text_without_a_final_call(text: str) -> None:
    assert CodeBlockFormat().find_call(text) is None


def test_qwen_json_calls_and_malformed_ones() -> None:
    fmt = QwenJsonFormat()
    good = '<tool_call>\n{"name": "python", "arguments": {"code": "print(2**10)"}}\n</tool_call>\n'
    assert fmt.find_call("I will run it. " + good) == fmt.find_call(good)
    assert fmt.find_call(good).code == "print(2**10)"  # type: ignore[union-attr]
    as_string = '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(3)\\"}"}</tool_call>'
    assert fmt.find_call(as_string).code == "print(3)"  # type: ignore[union-attr]
    bad_json = fmt.find_call('<tool_call>{"name": "python", "arguments": {"code": }</tool_call>')
    assert bad_json is not None and bad_json.code is None and "not valid JSON" in str(bad_json.error)
    other = fmt.find_call('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>')
    assert other is not None and other.code is None and "unknown tool 'search'" in str(other.error)
    no_code = fmt.find_call('<tool_call>{"name": "python", "arguments": {"src": "1"}}</tool_call>')
    assert no_code is not None and no_code.code is None
    assert fmt.find_call(good + "Done.") is None
    assert fmt.find_call('<tool_call>{"name": "python"') is None


def test_results_are_rendered_inside_the_output_delimiter() -> None:
    assert make_format("code_block").render("42") == "\n```output\n42\n```\n"
    assert make_format("qwen_json").render("42") == "\n<tool_response>\n42\n</tool_response>\n"
    assert make_format("qwen_json", chat_turns=True).render("42") == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match="tool_call_format='xml'"):
        make_format("xml")


def test_result_text_shows_errors_and_limits_and_keeps_the_end() -> None:
    ok = ToolResult("0", "ok", stdout="42\n")
    assert result_text(ok, 100) == "42"
    error = ToolResult("0", "error", stdout="partial\n", stderr="Traceback ...\nZeroDivisionError: division by zero\n")
    assert result_text(error, 100) == "partial\nTraceback ...\nZeroDivisionError: division by zero"
    timeout = ToolResult("0", "timeout", time_s=10.0)
    assert result_text(timeout, 100) == "TimeoutError: the code ran longer than 10 s and was stopped"
    long = ToolResult("0", "ok", stdout="x" * 50 + "END")
    assert result_text(long, 10) == "[... 43 characters cut]\n" + "x" * 7 + "END"
    assert result_text(ToolResult("0", "ok", stdout="abc", truncated=True), 10) == "[... output truncated]\nabc"
    assert result_text(ToolResult("0", "invalid_call", stderr="bad JSON"), 10) == "bad JSON"


# ------------------------------------------------------------------------------------------------------- client


def test_http_client_speaks_the_contract_and_retries_a_busy_server() -> None:
    with StubToolServer(busy=2) as stub:
        client = HttpToolClient(stub.url, api_key="k3y", retry_deadline_s=30)
        try:
            first = client.run([ToolRequest("0", "print(6*7)", "run-a", 5.0), ToolRequest("1", "import os", "run-b")])
            assert [(r.id, r.status, r.stdout, r.session_id) for r in first] == [
                ("0", "ok", "42\n", "run-a@stub-1"),
                ("1", "error", "", "run-b@stub-1"),
            ]
            assert "NameError" in first[1].stderr
            client.run([ToolRequest("0", "print(2*3)", first[0].session_id)])
        finally:
            client.close()
    assert len(stub.bodies) == 4  # two 503s, then the batch, then the second call
    assert stub.bodies[2] == {
        "calls": [
            {"code": "print(6*7)", "session_id": "run-a", "timeout_s": 5.0, "id": "0"},
            {"code": "import os", "session_id": "run-b", "timeout_s": None, "id": "1"},
        ]
    }
    assert stub.bodies[3]["calls"][0]["session_id"] == "run-a@stub-1"  # the full id goes back
    assert all(h["Authorization"] == "Bearer k3y" for h in stub.headers)
    assert stub.headers[3]["X-RLVR-Session"] == "run-a@stub-1"  # one session: routable
    assert "X-RLVR-Session" not in stub.headers[2]


def test_http_client_gives_up_at_the_deadline_and_on_a_refusal() -> None:
    with StubToolServer(busy=100) as stub:
        client = HttpToolClient(stub.url, retry_deadline_s=0.0)
        with pytest.raises(ToolServerError, match=r"answered 503.*gave up after 1 attempts"):
            client.run([ToolRequest("0", "print(1*1)")])
        client.close()

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": "calls[0].code: field required"})

    client = HttpToolClient("http://tools", client=httpx.Client(transport=httpx.MockTransport(refuse)))
    with pytest.raises(ToolServerError, match=r"answered 422.*calls\[0\].code"):
        client.run([ToolRequest("0", "x")])

    def short(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"results": []})

    client = HttpToolClient("http://tools", client=httpx.Client(transport=httpx.MockTransport(short)))
    with pytest.raises(ToolServerError, match="0 results for 1 calls"):
        client.run([ToolRequest("0", "x")])


def test_a_session_stays_on_one_of_several_servers() -> None:
    seen: dict[str, set[str]] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        calls = json.loads(request.content)["calls"]
        for c in calls:
            seen.setdefault(c["session_id"].split("@")[0], set()).add(request.url.host)
        return httpx.Response(200, json={"results": [{"id": c["id"], "status": "ok"} for c in calls]})

    client = HttpToolClient(["http://a", "http://b"], client=httpx.Client(transport=httpx.MockTransport(handler)))
    sessions = [f"run-{i}" for i in range(16)]
    client.run([ToolRequest(str(i), "1", s) for i, s in enumerate(sessions)])
    client.run([ToolRequest(str(i), "1", s + "@inst") for i, s in enumerate(sessions)])
    assert all(len(hosts) == 1 for hosts in seen.values())  # the given and the full id go to the same server
    assert {h for hosts in seen.values() for h in hosts} == {"a", "b"}


def test_closing_sessions_goes_to_each_ones_server_and_never_raises() -> None:
    deletes: list[tuple[str, str, str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down":
            raise httpx.ConnectError("refused", request=request)
        deletes.append(
            (request.method, request.url.host, request.url.raw_path.decode(), request.headers["X-RLVR-Session"])
        )
        return httpx.Response(404 if "gone" in request.url.path else 204)

    client = HttpToolClient(["http://a", "http://b"], client=httpx.Client(transport=httpx.MockTransport(handler)))
    ids = ["run-0@i 1", "run-1@i", "gone@i"]
    assert client.close_sessions(ids) == 2  # the 404 is not counted, nor raised
    assert [(m, h) for m, h, _, _ in deletes] == [("DELETE", client.url_for(i).split("//")[1]) for i in ids]
    assert deletes[0][2:] == ("/v1/tools/sessions/run-0%40i%201", "run-0@i 1")  # quoted path, routing header
    down = HttpToolClient("http://down", client=httpx.Client(transport=httpx.MockTransport(handler)))
    assert down.close_sessions(["x@i", "y@i"]) == 0  # unreachable: logged, the rest skipped, no exception


# ------------------------------------------------------------------------------------------------------- config


def _config(**overrides: Any) -> Any:
    return config_from_dict({"model_name_or_path": "m", "train_data": "d.jsonl", **overrides})


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"tools": ["bash"]}, "tools=['bash']"),
        ({"tool_call_format": "xml"}, "tool_call_format='xml'"),
        ({"max_tool_calling_iterations": 0}, "max_tool_calling_iterations=0"),
        ({"tool_timeout_s": 0}, "tool_timeout_s=0"),
        ({"tool_output_max_chars": 0}, "tool_output_max_chars=0"),
        ({"tool_server_urls": ["localhost:8000"]}, "tool_server_urls='localhost:8000'"),
        ({"tools": ["python"], "advantage_estimator": "process"}, "advantage_estimator='process'"),
    ],
)
def test_bad_tool_options_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(**overrides)
    assert str(info.value).startswith(field)


def test_tool_options_and_trl_alias() -> None:
    c = _config(tools=["python"], tool_call_format="qwen_json", max_tool_calling_iterations=2)
    assert (c.tools, c.tool_call_format, c.max_tool_calling_iterations, c.tool_server_urls) == (
        ("python",),
        "qwen_json",
        2,
        None,
    )
    with pytest.raises(ConfigError, match="max_tool_calling_iterations"):
        _config(max_tool_calls=2)
