"""Helpers of the tool tests: a tiny model taught to call the tool, a fake tool client, a scripted backend and a
stub HTTP server speaking the ``POST /v1/tools/python`` contract (test helpers only; the trainer has none of them).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainer.rollout.base import Continuation, PromptEncoder, SamplingParams, StopCondition
from trainer.tiny import build_tiny_model, build_tokenizer, supervised_warm_up
from trainer.tools.client import ToolRequest, ToolResult

PRODUCT = re.compile(r"^print\((\d+)\s*\*\s*(\d+)\)$")


def taught_completion(a: int, b: int) -> str:
    """What the tiny model is taught to write for ``Compute a times b.``: a call, its output, the answer."""
    return f"```python\nprint({a}*{b})\n```\n```output\n{a * b}\n```\nThe answer is {a * b}."


TAUGHT = [(6, 7), (12, 3), (9, 8), (5, 5)]
FENCES = ["```python", "```output", "```"]


def build_tool_model(path: Path) -> Path:
    """Save to ``path`` a 2-layer Qwen2 (32-wide heads, as vLLM's CPU attention needs) taught (60 steps, ~1 s) to
    answer ``Compute a times b.`` with a python call, its output and the answer (:func:`taught_completion`); the
    fences are single tokens."""
    pairs = [(f"Compute {a} times {b}.", taught_completion(a, b)) for a, b in TAUGHT]
    tokenizer = build_tokenizer([p + " " + c for p, c in pairs] * 5, vocab_size=300, extra_tokens=FENCES)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, seed=0)
    supervised_warm_up(model, tokenizer, pairs, steps=60, batch_size=8, learning_rate=3e-3)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def run_product(code: str) -> tuple[str, str, str]:
    """A stand-in interpreter that knows one program, ``print(a*b)``: ``(status, stdout, stderr)``."""
    m = PRODUCT.match(code.strip())
    if m is None:
        return "error", "", "NameError: the stand-in runs only print(a*b)"
    return "ok", f"{int(m.group(1)) * int(m.group(2))}\n", ""


@dataclass
class FakeToolClient:
    """Answers calls with :func:`run_product` (or ``statuses`` scripted per call, in order); records requests and
    hands out full session ids ``<given>@fake``."""

    statuses: list[str] = field(default_factory=list)
    batches: list[list[ToolRequest]] = field(default_factory=list)
    closed: bool = False
    closed_sessions: list[list[str]] = field(default_factory=list)  # each close_sessions call's ids
    close_delay_s: float = 0.0  # how long closing sessions takes

    def run(self, requests: Sequence[ToolRequest]) -> list[ToolResult]:
        self.batches.append(list(requests))
        out = []
        for r in requests:
            status, stdout, stderr = run_product(r.code)
            if self.statuses:
                status = self.statuses.pop(0)
            session = None if r.session_id is None else r.session_id.split("@")[0] + "@fake"
            out.append(ToolResult(r.id, status, stdout, stderr, False, 0.01, session))
        return out

    def close_sessions(self, session_ids: Sequence[str]) -> int:
        self.closed_sessions.append(list(session_ids))
        time.sleep(self.close_delay_s)
        return len(session_ids)

    def close(self) -> None:
        self.closed = True


class ScriptedBackend:
    """A backend whose rows continue with scripted texts (to pin down the loop's bookkeeping).

    Prompts must start with ``row<k>``; ``turns(k, t)`` is row ``k``'s text in its turn ``t`` (0-based), followed
    by EOS where ``eos_after(k, t)``. Each call's prefixes are recorded.
    """

    def __init__(self, tokenizer: Any, turns: Callable[[int, int], str], eos_after: Callable[[int, int], bool]) -> None:
        self.tokenizer = tokenizer
        self.prompts = PromptEncoder(tokenizer, apply_chat_template=False)
        self.pad_token_id = self.prompts.pad_token_id
        self.eos_token_ids = (int(tokenizer.eos_token_id),)
        self.turns, self.eos_after = turns, eos_after
        self.calls: list[list[list[int]]] = []
        self.turn_of: dict[int, int] = {}

    def continue_rows(
        self, prefixes: Sequence[Sequence[int]], sampling: SamplingParams, budgets: Sequence[int], stop: StopCondition
    ) -> list[Continuation]:
        self.calls.append([list(p) for p in prefixes])
        out = []
        for prefix, budget in zip(prefixes, budgets, strict=True):
            match = re.match(r"row(\d+)", self.tokenizer.decode(list(prefix)))
            assert match is not None
            k = int(match.group(1))
            t = self.turn_of.get(k, 0)
            self.turn_of[k] = t + 1
            ids = list(self.tokenizer(self.turns(k, t), add_special_tokens=False)["input_ids"])
            if self.eos_after(k, t):
                ids = [*ids, self.eos_token_ids[0]]
            ids = ids[:budget]
            out.append(Continuation(ids, bool(ids) and ids[-1] == self.eos_token_ids[0]))
        return out

    def sync_weights(self) -> dict[str, float]:
        return {}

    def sleep(self) -> None:
        pass

    def close(self) -> None:
        pass


class StubToolServer:
    """A real HTTP server on 127.0.0.1 speaking the tools contract with :func:`run_product`; the first
    ``busy`` requests are answered 503 with ``Retry-After: 0``; ``marker`` starts every stdout. Records bodies and
    headers."""

    def __init__(self, busy: int = 0, marker: str = "") -> None:
        self.busy = busy
        self.marker = marker
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.bodies.append(body)
                stub.headers.append(dict(self.headers))
                if self.path != "/v1/tools/python":
                    return self._send(404, {"detail": "no such route"})
                if stub.busy > 0:
                    stub.busy -= 1
                    return self._send(503, {"detail": "busy"}, {"Retry-After": "0"})
                results = []
                for call in body["calls"]:
                    status, stdout, stderr = run_product(call["code"])
                    stdout = stub.marker + stdout
                    sid = call["session_id"]
                    full = None if sid is None else (sid if "@" in sid else f"{sid}@stub-1")
                    results.append(
                        {
                            "id": call["id"],
                            "status": status,
                            "stdout": stdout,
                            "stderr": stderr,
                            "truncated": False,
                            "time_s": 0.002,
                            "session_id": full,
                        }
                    )
                self._send(200, {"results": results})

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubToolServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
