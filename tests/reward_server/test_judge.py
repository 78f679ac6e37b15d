"""The judge model as an add-on to math accuracy (issue 23), against a stand-in OpenAI-compatible server this test
starts on 127.0.0.1: it answers ``/v1/chat/completions`` from a table keyed by the student's answer, and records
every call (no model is downloaded). Checked: the reading of the three label families, that answers the rules
accept never reach the judge, that refused ones and prose references reach it in one batch, that a failure
(HTTP error, unreadable reply, timeout) is ``grader_error`` with a null reward, the metrics, and the 422 when no
judge is configured; in-process and through a live server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from reward_server.app import create_app
from reward_server.engine.judge import JudgeClient, JudgeQuestion
from reward_server.settings import Settings
from reward_server.verifiers.math.judge import build_judge_messages, judge_answer, parse_judge_reply
from tests.reward_server.serverproc import ServerProcess


class StandIn:
    """A stand-in judge server: ``replies`` maps a student's answer to the reply text (``"HTTP 500"`` answers
    that status, ``"SLEEP <s>"`` waits that long and then says True); every call is recorded. With
    ``barrier`` set, a call waits until that many are in flight (or answers 500 after 5 s): a client that
    sent them one after another would fail."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.calls: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.barrier: threading.Barrier | None = None
        self.delay_s = 0.0
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                code, text = stand_in.answer(self.path, body)
                payload = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
                    if code == 200
                    else {"error": text}
                ).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        user = body["messages"][-1]["content"]
        student = user.split("Student's final answer:\n", 1)[1].split("\n\n", 1)[0]
        with self._lock:
            self.calls.append({"path": path, "model": body["model"], "answer": student, "user": user})
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.barrier is not None:
                try:
                    self.barrier.wait(timeout=5)
                except threading.BrokenBarrierError:
                    return 500, "the calls did not arrive together"
            time.sleep(self.delay_s)
            reply = self.replies.get(student, "False")
            if reply.startswith("HTTP "):
                return int(reply.split()[1]), "stand-in failure"
            if reply.startswith("SLEEP "):
                time.sleep(float(reply.split()[1]))
                return 200, "True"
            return 200, reply
        finally:
            with self._lock:
                self.in_flight -= 1

    def answers(self) -> list[str]:
        return sorted(c["answer"] for c in self.calls)

    def reset(self) -> None:
        """Forget the calls, once the calls of an earlier test have ended (a timed-out one still sleeps)."""
        deadline = time.monotonic() + 10
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        self.calls.clear()
        self.max_in_flight = 0
        self.barrier = None
        self.delay_s = 0.0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


REPLIES = {
    "43": "The reference is 42; the student wrote 43.\nFinal Decision: False",
    "\\frac{84}{2}": "<think>84/2 is 42.</think>\nTrue",
    "The second player wins.": "\\boxed{A}",
    "7": "HTTP 500",
    "8": "I am not sure what to say.",
    "9": "SLEEP 3",
}


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    s = StandIn(REPLIES)
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(stand_in: StandIn) -> Iterator[TestClient]:
    settings = Settings(
        math_workers=1,
        preload_language_models=False,
        judge_url=stand_in.url,
        judge_model="stand-in/judge",
        judge_timeout_s=1.0,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _metric(client: TestClient, line_start: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    return 0.0


# --- the verifier's side: the reply and the prompt


@pytest.mark.parametrize(
    ("reply", "correct", "label"),
    [
        ("True", True, "True"),
        ("false", False, "false"),
        ("Final Decision: True", True, "True"),
        ("**Final Decision:** False.", False, "False"),
        ("Correct", True, "Correct"),
        ("The student's answer matches.\nIncorrect", False, "Incorrect"),
        ("A", True, "A"),
        ("Judgement: B", False, "B"),
        ("C", False, "C"),  # CompassVerifier's INVALID: a wrong response
        ("\\boxed{A}", True, "A"),
        ("<think>B looks right? No: A.</think>\n\\boxed{B}", False, "B"),
        ("<think>is it True?</think>\nFalse", False, "False"),
    ],
)
def test_reply_labels_of_the_three_families(reply: str, correct: bool, label: str) -> None:
    got = parse_judge_reply(reply)
    assert (got.correct, got.label) == (correct, label)


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "The answer is not correct",  # a label inside a sentence: never read as "correct"
        "True or False",
        "A and B",
        "<think>True",  # the reasoning never ended
        "\\boxed{42}",
        "Yes",
    ],
)
def test_unreadable_replies_give_no_verdict(reply: str) -> None:
    got = parse_judge_reply(reply)
    assert got.correct is None and got.detail


def test_prompt_holds_question_reference_answer_and_the_label_asked() -> None:
    for prompt, words in (("tinyv", "True"), ("xverify", "Correct"), ("compassverifier", "A if")):
        system, user = build_judge_messages("What is 6*7?", "42", "\\frac{84}{2}", prompt)  # type: ignore[arg-type]
        assert system["role"] == "system" and user["role"] == "user"
        assert "What is 6*7?" in user["content"] and "Reference answer:\n42\n" in user["content"]
        assert "Student's final answer:\n\\frac{84}{2}\n" in user["content"] and words in user["content"]
    _, user = build_judge_messages(None, "42", "x" * 5000)
    assert "(not given)" in user["content"] and "x" * 2000 in user["content"] and "x" * 2001 not in user["content"]


def test_answer_shown_for_a_prose_reference() -> None:
    assert judge_answer("Pair the moves.\n\nThe second player wins.") == "The second player wins."
    assert judge_answer("<think>hmm</think>So the answer is \\boxed{\\text{second}}.") == "\\text{second}"
    assert judge_answer("Pair the moves.\n\nThe second player", truncated=True) is None  # cut: not an answer
    assert judge_answer("<think>The second player wins") is None


# --- the engine, through POST /v1/rewards


def _post(client: TestClient, items: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    r = client.post("/v1/rewards", json={"items": items, "components": {"accuracy": {"judge": True}}, **extra})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


PROSE = "The second player has a winning strategy: mirror every move of the first player across the centre."


def test_only_what_the_rules_refuse_reaches_the_judge_in_one_batch(client: TestClient, stand_in: StandIn) -> None:
    stand_in.reset()
    stand_in.barrier = threading.Barrier(2)  # the two calls must be in flight together
    items = [
        {"id": "right", "response": "So $\\boxed{42}$.", "ground_truth": "42"},
        {"id": "right2", "response": "The answer is 42.", "ground_truth": "42"},
        {"id": "wrong", "response": "So $\\boxed{43}$.", "ground_truth": "42"},
        {"id": "form", "response": "So $\\boxed{\\frac{84}{2}}$.", "ground_truth": "42"},
        {"id": "prose", "response": "Mirror the moves.\n\nThe second player wins.", "ground_truth": PROSE},
        {"id": "none", "response": "<think>six times seven is", "ground_truth": "42"},
        {"id": "empty_ref", "response": "\\boxed{1}", "ground_truth": "N/A"},
    ]
    before_rule = _metric(client, 'rlvr_accuracy_decided_total{path="rule"}')
    before_judge = _metric(client, 'rlvr_accuracy_decided_total{path="judge"}')
    results = {r["id"]: r for r in _post(client, items)}
    # \frac{84}{2} is 42 to the rules too: only the refused 43 and the prose reference were asked.
    assert stand_in.answers() == ["43", "The second player wins."]
    assert all(c["path"] == "/v1/chat/completions" and c["model"] == "stand-in/judge" for c in stand_in.calls)
    acc = {k: r["components"]["accuracy"] for k, r in results.items()}
    rewards = [results[k]["reward"] for k in ("right", "right2", "wrong", "form", "prose", "none")]
    assert rewards == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert acc["right"]["info"]["decided_by"] == acc["right2"]["info"]["decided_by"] == "rule"
    assert acc["none"]["status"] == "no_answer" and acc["none"]["info"]["decided_by"] == "rule"
    assert acc["wrong"]["info"]["decided_by"] == "judge" and acc["wrong"]["info"]["judge_label"] == "False"
    assert acc["prose"]["info"]["decided_by"] == "judge"
    assert acc["prose"]["info"]["rule_status"] == "invalid_ground_truth"
    assert acc["prose"]["info"]["judge_label"] == "A" and acc["prose"]["status"] == "ok"
    # A placeholder reference has no value to compare with: never judged, still invalid_ground_truth.
    assert results["empty_ref"]["status"] == "invalid_ground_truth" and results["empty_ref"]["reward"] is None
    # Decided by the rules: right, right2, form, none; by the judge: wrong, prose (empty_ref has no verdict).
    assert _metric(client, 'rlvr_accuracy_decided_total{path="judge"}') - before_judge == 2
    assert _metric(client, 'rlvr_accuracy_decided_total{path="rule"}') - before_rule == 4


def test_a_refused_right_form_is_paid_on_the_judges_word(client: TestClient, stand_in: StandIn) -> None:
    stand_in.reset()
    results = _post(client, [{"id": "a", "response": "\\boxed{43}", "ground_truth": "42", "prompt": "What is 6*7?"}])
    assert results[0]["reward"] == 0.0 and stand_in.calls[0]["answer"] == "43"
    assert "What is 6*7?" in stand_in.calls[0]["user"]
    stand_in.replies["44"] = "Correct"
    try:
        results = _post(client, [{"id": "b", "response": "\\boxed{44}", "ground_truth": "42"}])
    finally:
        del stand_in.replies["44"]
    acc = results[0]["components"]["accuracy"]
    assert results[0]["reward"] == 1.0 and acc["info"]["correct"] is True and acc["info"]["rule_status"] == "ok"
    assert acc["info"]["judge_model"] == "stand-in/judge" and "Correct" in acc["detail"]


def test_judge_failures_are_grader_error_never_a_score(client: TestClient, stand_in: StandIn) -> None:
    stand_in.reset()
    before = {r: _metric(client, f'rlvr_judge_failures_total{{reason="{r}"}}') for r in ("http_error", "unparseable")}
    latency_before = _metric(client, "rlvr_judge_latency_seconds_count")
    items = [
        {"id": "http", "response": "\\boxed{7}", "ground_truth": "42"},
        {"id": "garbled", "response": "\\boxed{8}", "ground_truth": "42"},
        {"id": "fine", "response": "\\boxed{43}", "ground_truth": "42"},
    ]
    results = {r["id"]: r for r in _post(client, items)}
    for k in ("http", "garbled"):
        assert results[k]["reward"] is None and results[k]["status"] == "grader_error"
        assert results[k]["components"]["accuracy"]["score"] is None
    assert results["http"]["components"]["accuracy"]["info"]["judge_failure"] == "http_error"
    assert "HTTP 500" in results["http"]["components"]["accuracy"]["detail"]
    assert results["garbled"]["components"]["accuracy"]["info"]["judge_failure"] == "unparseable"
    assert results["fine"]["reward"] == 0.0
    assert _metric(client, 'rlvr_judge_failures_total{reason="http_error"}') - before["http_error"] == 1
    assert _metric(client, 'rlvr_judge_failures_total{reason="unparseable"}') - before["unparseable"] == 1
    assert _metric(client, "rlvr_judge_latency_seconds_count") - latency_before == 3


def test_judge_timeout_is_grader_error(client: TestClient, stand_in: StandIn) -> None:
    stand_in.reset()
    start = time.perf_counter()
    results = _post(client, [{"id": "slow", "response": "\\boxed{9}", "ground_truth": "42"}])
    assert time.perf_counter() - start < 2.9  # RLVR_JUDGE_TIMEOUT_S is 1 s; the stand-in takes 3
    acc = results[0]["components"]["accuracy"]
    assert results[0]["reward"] is None and results[0]["status"] == "grader_error"
    assert acc["info"]["judge_failure"] == "timeout" and "RLVR_JUDGE_TIMEOUT_S" in acc["detail"]


def test_judge_past_the_request_budget_is_timeout_not_the_rules_zero(stand_in: StandIn) -> None:
    stand_in.reset()
    settings = Settings(
        math_workers=1, preload_language_models=False, judge_url=stand_in.url, judge_timeout_s=10, request_budget_s=1
    )
    with TestClient(create_app(settings)) as c:
        results = _post(c, [{"id": "slow", "response": "\\boxed{9}", "ground_truth": "42"}])
    assert results[0]["reward"] is None and results[0]["status"] == "timeout"
    assert "RLVR_REQUEST_BUDGET_S" in results[0]["components"]["accuracy"]["detail"]


def test_without_judge_option_nothing_is_asked(client: TestClient, stand_in: StandIn) -> None:
    stand_in.reset()
    r = client.post("/v1/rewards", json={"items": [{"id": "a", "response": "\\boxed{43}", "ground_truth": "42"}]})
    assert r.json()["results"][0]["reward"] == 0.0 and stand_in.calls == []
    assert "decided_by" not in r.json()["results"][0]["components"]["accuracy"]["info"]


def test_judge_asked_without_a_judge_is_422_naming_the_field() -> None:
    with TestClient(create_app(Settings(math_workers=1, preload_language_models=False))) as c:
        item = {"id": "a", "response": "\\boxed{43}", "ground_truth": "42"}
        r = c.post("/v1/rewards", json={"items": [item], "components": {"accuracy": {"judge": True}}})
        assert r.status_code == 422
        [err] = r.json()["detail"]
        assert err["loc"] == ["body", "components", "accuracy", "judge"] and "RLVR_JUDGE_URL" in err["msg"]
        r = c.post("/v1/rewards", json={"items": [{**item, "components": {"accuracy": {"weight": 1, "judge": True}}}]})
        assert r.status_code == 422
        assert r.json()["detail"][0]["loc"] == ["body", "items", 0, "components", "accuracy", "judge"]


# --- the client: batching, concurrency, limits


def test_client_sends_a_batch_at_once_and_keeps_its_concurrency(stand_in: StandIn) -> None:
    questions = [JudgeQuestion(None, "42", str(n)) for n in range(100, 106)]

    async def run(max_concurrency: int, max_batch: int = 1024) -> list[Any]:
        client = JudgeClient(stand_in.url, "m", max_concurrency=max_concurrency, max_batch=max_batch, timeout_s=10)
        try:
            return await client.judge(questions)
        finally:
            await client.close()

    stand_in.reset()
    stand_in.barrier = threading.Barrier(6)
    outcomes = asyncio.run(run(64))
    assert [o.correct for o in outcomes] == [False] * 6 and stand_in.max_in_flight == 6

    stand_in.reset()
    stand_in.delay_s = 0.05
    outcomes = asyncio.run(run(2))
    assert [o.correct for o in outcomes] == [False] * 6 and stand_in.max_in_flight == 2 and len(stand_in.calls) == 6

    stand_in.reset()
    outcomes = asyncio.run(run(64, max_batch=4))
    assert [o.failure for o in outcomes] == [None] * 4 + ["over_batch"] * 2 and len(stand_in.calls) == 4


def test_unreachable_judge_is_a_connection_failure() -> None:
    async def run() -> Any:
        client = JudgeClient("http://127.0.0.1:9/v1", "m", timeout_s=2)
        try:
            return await client.judge([JudgeQuestion(None, "42", "43")])
        finally:
            await client.close()

    [outcome] = asyncio.run(run())
    assert outcome.correct is None and outcome.failure == "connection"


# --- a live server


@pytest.mark.slow
def test_live_server_judges_the_refused_answers(stand_in: StandIn, tmp_path: Path) -> None:
    stand_in.reset()
    server = ServerProcess(tmp_path / "server.log", {"RLVR_JUDGE_URL": stand_in.url, "RLVR_JUDGE_MODEL": "live"})
    try:
        items = [
            {"id": "right", "response": "\\boxed{42}", "ground_truth": "42"},
            {"id": "wrong", "response": "\\boxed{43}", "ground_truth": "42"},
            {"id": "broken", "response": "\\boxed{7}", "ground_truth": "42"},
        ]
        body = {"items": items, "components": {"accuracy": {"judge": True}}}
        r = httpx.post(f"{server.url}/v1/rewards", json=body, timeout=60)
        assert r.status_code == 200, r.text
        results = {x["id"]: x for x in r.json()["results"]}
        assert [results[k]["reward"] for k in ("right", "wrong", "broken")] == [1.0, 0.0, None]
        assert results["broken"]["status"] == "grader_error"
        assert stand_in.answers() == ["43", "7"] and {c["model"] for c in stand_in.calls} == {"live"}
        assert server.metric('rlvr_accuracy_decided_total{path="judge"}') == 1
        assert server.metric('rlvr_accuracy_decided_total{path="rule"}') == 1
        assert server.metric('rlvr_judge_failures_total{reason="http_error"}') == 1
    finally:
        server.stop()
