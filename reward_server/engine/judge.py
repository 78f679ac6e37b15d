"""The judge model, an add-on to math ``accuracy`` (issue 23; TinyV's design, Xu et al. 2025, arXiv 2505.14625).

A request asks for it with ``components: {"accuracy": {"judge": true}}``. After the rule path has scored a
batch, :func:`judge_refusals` sends the judge the math items the rules *refused* (status ``ok``, reward 0)
and those whose reference is prose the rules cannot read (``invalid_ground_truth`` with a prose reference),
all at once; an answer the rules accept never reaches it, nor one without a final answer (``no_answer``), nor
one the rules could not score (``timeout``, ``error``).

:class:`JudgeClient` speaks to an OpenAI-compatible ``/chat/completions`` endpoint (``vllm serve``, SGLang's
``launch_server``) at ``RLVR_JUDGE_URL`` with httpx: one call per item, at most ``RLVR_JUDGE_MAX_CONCURRENCY`` in
flight over the whole server (the judge server batches what is in flight), each under ``RLVR_JUDGE_TIMEOUT_S``.
A call that fails (timeout, HTTP error, connection refused, a reply with no verdict) makes its item
``grader_error`` with a null reward: never 0, never 1. The verdict's ``info.decided_by`` says which path decided
(``rule`` or ``judge``); ``/metrics`` counts both (``rlvr_accuracy_decided_total``), the judge's failures
(``rlvr_judge_failures_total``) and its latency (``rlvr_judge_latency_seconds``).

The prompt and the reading of the reply are the verifier's (:mod:`reward_server.verifiers.math.judge`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from reward_server.metrics import Metrics
from reward_server.schemas.rewards import RewardItem
from reward_server.settings import Settings
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.math.judge import JudgePrompt, build_judge_messages, parse_judge_reply

__all__ = ["GRADER_ERROR", "JudgeClient", "JudgeOutcome", "JudgeQuestion", "judge_refusals"]

GRADER_ERROR = "grader_error"
"""The status of an item whose judge call failed: reward ``null`` (score it again, or drop it)."""

JUDGE_UNSET = (
    "this server has no judge model: start it with RLVR_JUDGE_URL=<an OpenAI-compatible server's base URL, "
    "e.g. http://127.0.0.1:8001/v1> and RLVR_JUDGE_MODEL=<the model it serves> (see docs/verifiers/judge.md)"
)


@dataclass(frozen=True, slots=True)
class JudgeQuestion:
    """One question for the judge: is ``answer`` the same as ``reference`` (for ``question``, when known)?"""

    question: str | None
    reference: str
    answer: str


@dataclass(frozen=True, slots=True)
class JudgeOutcome:
    """The judge's answer to one :class:`JudgeQuestion`.

    Attributes:
        correct: the verdict, or ``None`` when the call failed (``failure`` says how, ``detail`` why).
        label: the label the judge wrote (``True``, ``Incorrect``, ``B`` ...).
        failure: ``timeout``, ``http_error``, ``connection``, ``unparseable`` or ``over_batch``; ``None`` on success.
        latency_s: the call's wall time, in seconds.
    """

    correct: bool | None
    label: str | None = None
    failure: str | None = None
    detail: str | None = None
    latency_s: float = 0.0


class JudgeClient:
    """An async client for the judge's OpenAI-compatible endpoint, shared by every request of the server.

    Args:
        url: the base URL (``http://host:port/v1``); ``/chat/completions`` is added unless it is there already.
        model: the ``model`` field of each call.
        api_key: sent as a bearer token, when given.
        timeout_s: the limit of one call (connect, send, wait, read), in seconds.
        max_concurrency: calls in flight at once, over all requests.
        max_batch: the most items one :meth:`judge` call sends; those past it fail ``over_batch``.
        max_tokens: the most tokens the judge may write per reply.
        prompt: the label family asked for (:data:`~reward_server.verifiers.math.judge.JudgePrompt`).
        metrics: where failures and latencies are counted, if anywhere.
        transport: an httpx transport (tests); the default opens real connections.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_concurrency: int = 64,
        max_batch: int = 1024,
        max_tokens: int = 256,
        prompt: JudgePrompt = "tinyv",
        metrics: Metrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base = url.rstrip("/")
        self.endpoint = base if base.endswith("/chat/completions") else f"{base}/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.prompt: JudgePrompt = prompt
        self.metrics = metrics
        self._limit = asyncio.Semaphore(max_concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
            transport=transport,
        )
        self.calls = 0  # calls made, for tests and logs

    @classmethod
    def from_settings(cls, settings: Settings, metrics: Metrics | None = None) -> JudgeClient | None:
        """The client ``settings`` describe, or ``None`` when ``RLVR_JUDGE_URL`` is unset."""
        if settings.judge_url is None:
            return None
        key = settings.judge_api_key.get_secret_value() if settings.judge_api_key is not None else None
        return cls(
            settings.judge_url,
            settings.judge_model,
            api_key=key,
            timeout_s=settings.judge_timeout_s,
            max_concurrency=settings.judge_max_concurrency,
            max_batch=settings.judge_max_batch,
            max_tokens=settings.judge_max_tokens,
            prompt=settings.judge_prompt,
            metrics=metrics,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def judge(self, questions: Sequence[JudgeQuestion]) -> list[JudgeOutcome]:
        """Ask every question at once (at most ``max_concurrency`` in flight); outcomes in order. Never raises
        for a failed call: its outcome says how it failed."""
        over = JudgeOutcome(
            None,
            failure="over_batch",
            detail=f"more than {self.max_batch} items of one request for the judge (RLVR_JUDGE_MAX_BATCH)",
        )
        asked = questions[: self.max_batch]
        outcomes = list(await asyncio.gather(*(self._ask(q) for q in asked)))
        outcomes += [over] * (len(questions) - len(asked))
        if self.metrics is not None:
            for reason, n in Counter(o.failure for o in outcomes if o.failure is not None).items():
                self.metrics.judge_failures.labels(reason).inc(n)
        return outcomes

    async def _ask(self, q: JudgeQuestion) -> JudgeOutcome:
        body = {
            "model": self.model,
            "messages": build_judge_messages(q.question, q.reference, q.answer, self.prompt),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        async with self._limit:
            self.calls += 1
            start = time.perf_counter()
            outcome = await self._post(body)
            latency = time.perf_counter() - start
        if self.metrics is not None:
            self.metrics.judge_latency.observe(latency)
        return JudgeOutcome(outcome.correct, outcome.label, outcome.failure, outcome.detail, latency)

    async def _post(self, body: dict[str, Any]) -> JudgeOutcome:
        try:
            r = await self._http.post(self.endpoint, json=body)
        except httpx.TimeoutException:
            detail = f"the judge gave no reply within {self.timeout_s:g} s (RLVR_JUDGE_TIMEOUT_S)"
            return JudgeOutcome(None, failure="timeout", detail=detail)
        except httpx.HTTPError as exc:
            return JudgeOutcome(
                None, failure="connection", detail=f"cannot reach the judge at {self.endpoint}: {type(exc).__name__}"
            )
        if r.status_code != 200:
            return JudgeOutcome(
                None, failure="http_error", detail=f"the judge answered HTTP {r.status_code}: {r.text[:200]}"
            )
        try:
            content = r.json()["choices"][0]["message"]["content"]
            if not isinstance(content, str):
                raise TypeError(f"content is {type(content).__name__}")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return JudgeOutcome(
                None, failure="unparseable", detail=f"the judge's reply is not a chat completion: {exc}"[:300]
            )
        reply = parse_judge_reply(content)
        if reply.correct is None:
            return JudgeOutcome(None, failure="unparseable", detail=reply.detail)
        return JudgeOutcome(reply.correct, reply.label)


async def judge_refusals(
    items: Sequence[RewardItem], wanted: Sequence[int], done: list[dict[str, ComponentScore]], judge: JudgeClient
) -> None:
    """Ask ``judge`` about the items of ``wanted`` (indices of math items whose ``accuracy`` asked for it) that
    the rules refused or whose reference is prose, in one batch, and put its verdicts in ``done[i]["accuracy"]``.

    The other items of ``wanted`` get ``info.decided_by = "rule"`` where the rules gave a verdict. While the
    judge works, the asked items have no ``accuracy`` in ``done``: if the batch's budget runs out first, they
    end ``timeout``, never with the rules' 0.
    """
    asked: list[int] = []
    questions: list[JudgeQuestion] = []
    for i in wanted:
        s = done[i].get("accuracy")
        if s is None:
            continue
        answer = s.info.get("extracted_answer")
        refused = s.status == "ok" and s.score == 0.0
        prose = s.status == "invalid_ground_truth"  # the worker gave it an answer only when the reference is prose
        if answer and (refused or prose):
            asked.append(i)
            questions.append(JudgeQuestion(items[i].prompt, items[i].ground_truth or "", answer))
        elif s.score is not None:
            done[i]["accuracy"] = ComponentScore(s.score, s.status, s.detail, {**s.info, "decided_by": "rule"})
    if not asked:
        return
    rule = {i: done[i].pop("accuracy") for i in asked}
    outcomes = await judge.judge(questions)
    for i, outcome in zip(asked, outcomes, strict=True):
        s = rule[i]
        info = {**s.info, "rule_status": s.status}
        if outcome.correct is None:
            info["judge_failure"] = outcome.failure
            done[i]["accuracy"] = ComponentScore(None, GRADER_ERROR, outcome.detail, info)
            continue
        info.update(correct=outcome.correct, decided_by="judge", judge_label=outcome.label, judge_model=judge.model)
        detail = f"the judge ({judge.model}) answered {outcome.label}; the rules had said: {s.detail or s.status}"
        done[i]["accuracy"] = ComponentScore(float(outcome.correct), "ok", detail, info)
