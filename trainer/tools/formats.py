"""What a tool call looks like in generated text, and how its result is written back into the context.

Two formats, chosen by ``tool_call_format``:

- ``code_block`` (ToRL arXiv 2503.23383, SimpleTIR): the model writes a fenced block
  ```` ```python\\n<code>\\n``` ````; generation stops at the closing fence; the result is appended as
  ```` \\n```output\\n<stdout>\\n```\\n ````.
- ``qwen_json`` (Qwen2.5/Qwen3's tool-calling template, Hermes style): the model writes
  ``<tool_call>\\n{"name": "python", "arguments": {"code": "..."}}\\n</tool_call>``; generation stops after
  ``</tool_call>``; the result comes back as ``<tool_response>...</tool_response>``. Where the tokenizer has Qwen's
  ``<|im_start|>`` token, the response is its own ``user`` turn, as Qwen's chat template renders a tool message;
  otherwise it follows the call inline.

A call counts only when it is complete at the very end of the text generated so far (trailing whitespace allowed):
the rollout loop (:mod:`trainer.tools.rollout`) asks after each stop, never in the middle of a block.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from trainer.tools.client import ToolResult

ToolCallFormatName = Literal["code_block", "qwen_json"]
TOOL_CALL_FORMATS: tuple[str, ...] = ("code_block", "qwen_json")
#: The tools a config may list; the sandbox's Python is the one there is.
TOOLS: tuple[str, ...] = ("python",)


@dataclass(frozen=True)
class ToolCall:
    """A call found at the end of generated text.

    Attributes:
        code: the Python source to run; ``None`` when the call is malformed (then ``error`` says why and the call
            is answered with that message, without reaching the server).
        error: why a malformed call cannot run (bad JSON, an unknown tool, no ``code`` argument).
    """

    code: str | None
    error: str | None = None


class ToolCallFormat(ABC):
    """Finds calls in generated text and renders results.

    Attributes:
        name: the ``tool_call_format`` value.
        stop_strings: strings whose appearance ends a generation turn where a backend can only stop on strings
            (vLLM); a stop on one of them without a complete call is not a call, and generation goes on.
    """

    name: str
    stop_strings: tuple[str, ...]

    @abstractmethod
    def find_call(self, text: str) -> ToolCall | None:
        """The call that ``text`` ends with (trailing whitespace allowed), or ``None``."""

    @abstractmethod
    def render(self, output: str) -> str:
        """The text appended after a call: ``output`` inside the format's output delimiter. (A turn that ends with
        EOS ends the rollout, so a call is always answered mid-turn.)"""


class CodeBlockFormat(ToolCallFormat):
    """```` ```python ```` blocks, answered in ```` ```output ```` blocks (ToRL, ReTool's code-block variant)."""

    name = "code_block"
    # The closing fence, which the opening one ("```python") never contains.
    stop_strings = ("\n```\n",)
    _open = re.compile(r"```(?:python|py)[ \t]*\n")

    def find_call(self, text: str) -> ToolCall | None:
        body = text.rstrip()
        if not body.endswith("\n```"):
            return None
        opens = list(self._open.finditer(body))
        if not opens:
            return None
        code = body[opens[-1].end() : -len("```")]
        if "```" in code:  # the last python block was closed before: this fence closes something else
            return None
        return ToolCall(code=code.rstrip("\n"))

    def render(self, output: str) -> str:
        return f"\n```output\n{output}\n```\n"


class QwenJsonFormat(ToolCallFormat):
    """Qwen's ``<tool_call>`` JSON, answered in ``<tool_response>`` (Qwen2.5/Qwen3 chat templates, Hermes style).

    Args:
        chat_turns: render the response as Qwen's template renders a tool message (its own ``user`` turn between
            ``<|im_start|>`` and ``<|im_end|>``, then a new assistant turn); otherwise inline after the call.
    """

    name = "qwen_json"
    stop_strings = ("</tool_call>",)
    _call = re.compile(r"<tool_call>(.*?)</tool_call>\s*\Z", re.DOTALL)

    def __init__(self, *, chat_turns: bool = False) -> None:
        self.chat_turns = chat_turns

    def find_call(self, text: str) -> ToolCall | None:
        start = text.rfind("<tool_call>")
        match = self._call.match(text, start) if start >= 0 else None
        if match is None:
            return None
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            return ToolCall(None, f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})")
        if not isinstance(call, dict) or call.get("name") != "python":
            name = call.get("name") if isinstance(call, dict) else None
            return ToolCall(None, f"unknown tool {name!r}: the one tool is 'python'")
        arguments = call.get("arguments")
        if isinstance(arguments, str):  # some templates serialise arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        code = arguments.get("code") if isinstance(arguments, dict) else None
        if not isinstance(code, str):
            return ToolCall(None, 'the python tool takes {"code": "<source>"} as its arguments')
        return ToolCall(code=code)

    def render(self, output: str) -> str:
        response = f"<tool_response>\n{output}\n</tool_response>"
        if not self.chat_turns:
            return f"\n{response}\n"
        # The model stopped right after </tool_call>: its turn is closed here, as the chat template would close it.
        return f"<|im_end|>\n<|im_start|>user\n{response}<|im_end|>\n<|im_start|>assistant\n"


def make_format(name: str, *, chat_turns: bool = False) -> ToolCallFormat:
    """The format called ``name`` (one of :data:`TOOL_CALL_FORMATS`).

    Raises:
        ValueError: an unknown name.
    """
    if name == "code_block":
        return CodeBlockFormat()
    if name == "qwen_json":
        return QwenJsonFormat(chat_turns=chat_turns)
    raise ValueError(f"tool_call_format={name!r}: must be one of {TOOL_CALL_FORMATS}")


def result_text(result: ToolResult, max_chars: int) -> str:
    """What the model reads back for one call: stdout, then stderr where the program failed or wrote any, or a line
    that names the limit it hit; cut to ``max_chars`` characters (the end is kept: a traceback's last line says the
    most), with ``[... N characters cut]`` in front where it was cut or the server truncated it."""
    status = result.status
    parts = [result.stdout] if result.stdout else []
    if result.stderr:
        parts.append(result.stderr)
    if status == "timeout":
        parts.append(f"TimeoutError: the code ran longer than {result.time_s:.3g} s and was stopped")
    elif status == "memory_limit":
        parts.append("MemoryError: the code went over the sandbox's memory limit")
    elif status == "output_limit":
        parts.append("the code wrote more output than the sandbox keeps")
    elif status not in ("ok", "error", "invalid_call"):
        parts.append(f"the tool failed ({status})")
    text = "\n".join(p.rstrip("\n") for p in parts)
    cut = max(0, len(text) - max_chars)
    if cut:
        text = text[-max_chars:]
    if cut or result.truncated:
        text = f"[... {cut} characters cut]\n{text}" if cut else f"[... output truncated]\n{text}"
    return text
