"""Multi-turn rollouts with a Python tool: :class:`ToolBackend`, a :class:`~trainer.rollout.base.GenerationBackend`
wrapped around the transformers or vLLM backend, so the loop, evaluation, DDP and overlapped scoring use it
unchanged.

For each chunk of prompts (rows ``i*G .. i*G+G-1`` answer prompt ``i``):

1. every unfinished row is continued (:meth:`~trainer.rollout.base.GenerationBackend.continue_rows`) until EOS, its
   token budget, or the end of a tool call (:mod:`trainer.tools.formats`);
2. the calls of all rows that stopped on one go to the server in **one** batch (:mod:`trainer.tools.client`);
   each row's session keeps the interpreter's state between its calls;
3. each result is rendered inside the format's output delimiter, tokenised and appended to its row, marked in
   ``tool_output_mask``: in the context from then on, never in the loss, the KL or the entropy;
4. repeat until no row is left.

Limits, with TRL's names: a row makes at most ``max_tool_calling_iterations`` calls (a further call ends it, marked
truncated: it has no EOS), and holds at most ``max_completion_length`` tokens in all, the model's and the tool's
together (tool output that does not fit is cut and the row ends truncated).

**What is scored.** ``completion_texts`` holds the model's own text only: the tool's output is left out, so the
answer the reward server checks must be one the model wrote (a program that prints the answer earns nothing until
the model states it). The code the model wrote stays in.

**Infrastructure faults.** A result with an infrastructure status (``sandbox_error``, ``session_lost``,
``session_limit``) ends its row, which is flagged in ``tool_failed``: the loop gives it a null reward, so it is
neither trained on nor counted as wrong. A server that stays unreachable past ``tool_retry_deadline_s`` raises
:class:`~trainer.tools.client.ToolServerError` and stops the run (resume from the last checkpoint).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer.distributed import Distributed
from trainer.rollout.base import GenerationBackend, Prompt, RolloutBatch, SamplingParams
from trainer.tools.client import STATUSES, ToolClient, ToolRequest, ToolResult
from trainer.tools.formats import ToolCall, ToolCallFormat, result_text

#: Outcomes counted per call besides the server's statuses: a malformed call (answered with its error, never sent)
#: and a call past ``max_tool_calling_iterations`` (not made; the row ends).
_OUTCOMES = (*STATUSES, "invalid_call", "over_limit")


@dataclass
class ToolStats:
    """Counts of the tool calls since the last :meth:`reset` (one training step's, by the loop's use).

    Attributes:
        completions: rows finished.
        calls: calls answered (by the server, or malformed ones by their error).
        outcomes: calls per status in :data:`_OUTCOMES`.
        server_time_s: the calls' own run time as the server reports it (``time_s``), summed.
        wait_s: wall-clock seconds the rollouts waited on the server: the calls and the closing of sessions.
        failed_completions: rows ended by an infrastructure fault.
        sessions_closed: finished rollouts' sessions the server closed at the end of their batch.
    """

    completions: int = 0
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    server_time_s: float = 0.0
    wait_s: float = 0.0
    failed_completions: int = 0
    sessions_closed: int = 0

    def reset(self) -> None:
        """Start counting again."""
        self.__init__()  # type: ignore[misc]

    def metrics(self, dist: Distributed) -> dict[str, float]:
        """The step's ``tools/*`` metrics summed over ranks (every rank must call this): calls per completion,
        turns per completion (a turn is one stretch of the model's own text: calls + 1), the share of calls per
        non-``ok`` outcome, the server's run time and the time waited (summed over ranks: the wait is per rank, and
        each rank waits on its own calls)."""
        values = [self.completions, self.calls, self.server_time_s, self.wait_s, self.failed_completions]
        outcomes = [self.outcomes[o] for o in _OUTCOMES]
        totals = dist.sum(torch.tensor(values + outcomes + [self.sessions_closed], dtype=torch.float64))
        completions, calls = max(float(totals[0]), 1.0), float(totals[1])
        out = {
            "tools/calls": calls,
            "tools/calls_per_completion": calls / completions,
            "tools/turns_per_completion": (calls + float(totals[0])) / completions,
            "tools/error_rate": 1.0 - float(totals[5]) / calls if calls else 0.0,
            "tools/server_time_s": float(totals[2]),
            "tools/wait_s": float(totals[3]),
            "tools/failed_completions": float(totals[4]),
            "tools/sessions_closed": float(totals[-1]),
        }
        for name, count in zip(_OUTCOMES[1:], totals[6:-1].tolist(), strict=True):
            out[f"tools/status/{name}"] = float(count)
        return out


class ToolBackend:
    """A generation backend whose rollouts call a Python tool (see the module docstring).

    Args:
        inner: the backend that samples (transformers or vLLM); this one delegates weight sync, sleep and close
            to it.
        tokenizer: decodes the model's turns and tokenises tool output.
        client: runs the calls (:class:`~trainer.tools.client.HttpToolClient`); closed by :meth:`close`.
        call_format: how calls and results look (:func:`trainer.tools.formats.make_format`).
        max_tool_calling_iterations: most calls per completion.
        tool_timeout_s: each call's time limit sent to the server; ``None``: the server's default.
        output_max_chars: most characters of one call's output that go back into the context.
        session_prefix: the start of every session id this backend makes (the run's name).
    """

    def __init__(
        self,
        inner: GenerationBackend,
        tokenizer: PreTrainedTokenizerBase,
        client: ToolClient,
        call_format: ToolCallFormat,
        *,
        max_tool_calling_iterations: int,
        tool_timeout_s: float | None = None,
        output_max_chars: int = 2000,
        session_prefix: str = "rollout",
    ) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.client = client
        self.format = call_format
        self.max_tool_calling_iterations = max_tool_calling_iterations
        self.tool_timeout_s = tool_timeout_s
        self.output_max_chars = output_max_chars
        self.session_prefix = session_prefix
        self.stats = ToolStats()
        self.pad_token_id = inner.pad_token_id
        self.prompts = inner.prompts
        self.eos_token_ids = inner.eos_token_ids

    def generate(self, prompts: Sequence[Prompt], num_generations: int, sampling: SamplingParams) -> RolloutBatch:
        """Sample ``num_generations`` tool-using completions of each prompt (see the module docstring)."""
        ids, mask = self.prompts.encode(prompts)  # (n, P)
        rows = [
            _Row(prompt=row[m.bool()].tolist())
            for row, m in zip(ids, mask, strict=True)
            for _ in range(num_generations)
        ]
        batch_id = uuid.uuid4().hex[:12]
        for i, row in enumerate(rows):
            row.session_id = f"{self.session_prefix}-{batch_id}-{i}"
        budget = sampling.max_new_tokens
        pending = list(range(len(rows)))
        while pending:
            continuations = self.inner.continue_rows(
                [rows[r].prompt + rows[r].tokens for r in pending],
                sampling,
                [budget - len(rows[r].tokens) for r in pending],
                self.format,
            )
            going_on, calls = [], []
            for r, c in zip(pending, continuations, strict=True):
                row = rows[r]
                row.append(c.token_ids, c.log_probs, tool=False)
                text = str(self.tokenizer.decode(c.token_ids, skip_special_tokens=True))
                row.texts.append(text)
                if c.ended_with_eos or len(row.tokens) >= budget or not c.token_ids:
                    row.ended_with_eos = c.ended_with_eos
                    continue
                call = self.format.find_call(text)
                if call is None:  # a stop string without a complete call (vLLM): the model goes on
                    going_on.append(r)
                elif row.calls >= self.max_tool_calling_iterations:
                    self.stats.outcomes["over_limit"] += 1
                else:
                    row.calls += 1
                    calls.append((r, call))
            for (r, _), result in zip(calls, self._run([(rows[r], call) for r, call in calls]), strict=True):
                if self._answer(rows[r], result, budget):
                    going_on.append(r)
            pending = sorted(going_on)
        self.stats.completions += len(rows)
        # Every row is finished: free their interpreters now, not at the server's TTL (its session cap is shared).
        opened = [r.session_id for r in rows if r.session_id is not None and r.opened]
        if opened:
            started = time.perf_counter()
            self.stats.sessions_closed += self.client.close_sessions(opened)
            self.stats.wait_s += time.perf_counter() - started
        return self._batch(rows, ids, mask, num_generations)

    def _run(self, calls: Sequence[tuple[_Row, ToolCall]]) -> list[ToolResult]:
        """One batch for every well-formed call; a malformed one is answered with its error, without the server."""
        requests = [
            ToolRequest(id=str(i), code=call.code, session_id=row.session_id, timeout_s=self.tool_timeout_s)
            for i, (row, call) in enumerate(calls)
            if call.code is not None
        ]
        answered: list[ToolResult] = []
        if requests:
            started = time.perf_counter()
            answered = self.client.run(requests)
            self.stats.wait_s += time.perf_counter() - started
        by_id = {r.id: r for r in answered}
        return [
            by_id[str(i)]
            if call.code is not None
            else ToolResult(id=str(i), status="invalid_call", stderr=call.error or "")
            for i, (_, call) in enumerate(calls)
        ]

    def _answer(self, row: _Row, result: ToolResult, budget: int) -> bool:
        """Count ``result`` and append its rendered output to ``row``; whether the row goes on generating."""
        self.stats.calls += 1
        self.stats.outcomes[result.status] += 1
        self.stats.server_time_s += result.time_s
        if result.infrastructure_failure:
            row.failed = True
            self.stats.failed_completions += 1
            return False
        if result.session_id:  # the full "<given>@<instance>" id from now on
            row.session_id, row.opened = result.session_id, True
        rendered = self.format.render(result_text(result, self.output_max_chars))
        output_ids = list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
        left = budget - len(row.tokens)
        row.append(output_ids[:left], None, tool=True)
        return len(output_ids) < left

    def _batch(self, rows: Sequence[_Row], ids: torch.Tensor, mask: torch.Tensor, g: int) -> RolloutBatch:
        n, width = len(rows), max(1, max(len(r.tokens) for r in rows))
        completion_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)  # (N, C)
        completion_mask = torch.zeros((n, width), dtype=torch.long)  # (N, C)
        tool_mask = torch.zeros((n, width), dtype=torch.long)  # (N, C)
        with_logps = all(r.log_probs is not None for r in rows)
        sampling_logp = torch.zeros((n, width), dtype=torch.float32)  # (N, C)
        for i, r in enumerate(rows):
            k = len(r.tokens)
            completion_ids[i, :k] = torch.tensor(r.tokens, dtype=torch.long)
            completion_mask[i, :k] = 1
            tool_mask[i, :k] = torch.tensor(r.tool, dtype=torch.long)
            if with_logps and k:
                sampling_logp[i, :k] = torch.tensor(r.log_probs, dtype=torch.float32)
        device = _device(self.inner)
        return RolloutBatch(
            prompt_ids=ids.repeat_interleave(g, 0).to(device),
            prompt_mask=mask.repeat_interleave(g, 0).to(device),
            completion_ids=completion_ids.to(device),
            completion_mask=completion_mask.to(device),
            is_truncated=torch.tensor([not r.ended_with_eos for r in rows], device=device),
            prompt_index=torch.arange(len(rows) // g, device=device).repeat_interleave(g),
            completion_texts=["".join(r.texts) for r in rows],
            sampling_log_probs=sampling_logp.to(device) if with_logps else None,
            tool_output_mask=tool_mask.to(device),
            tool_failed=torch.tensor([r.failed for r in rows], device=device),
        )

    def sync_weights(self) -> dict[str, float]:
        """The inner backend's sync."""
        return self.inner.sync_weights()

    def sleep(self) -> None:
        """The inner backend's sleep."""
        self.inner.sleep()

    def close(self) -> None:
        """Close the inner backend and the tool client."""
        try:
            self.inner.close()
        finally:
            self.client.close()

    def continue_rows(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: a tool rollout is not continued from outside (it would lose its sessions)."""
        raise NotImplementedError("ToolBackend runs its own turns; call generate")


@dataclass
class _Row:
    """One rollout in progress: its prompt, the tokens so far (the model's and the tool's), and its session."""

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    tool: list[int] = field(default_factory=list)  # 1 where the tool wrote the token
    log_probs: list[float] | None = field(default_factory=list)  # the sampler's, None once a backend gave none
    texts: list[str] = field(default_factory=list)  # the model's own turns, decoded: what is scored
    session_id: str | None = None
    opened: bool = False  # the server answered with the session's full id: it holds a session to close
    calls: int = 0
    ended_with_eos: bool = False
    failed: bool = False

    def append(self, tokens: Sequence[int], log_probs: Sequence[float] | None, *, tool: bool) -> None:
        self.tokens.extend(tokens)
        self.tool.extend([int(tool)] * len(tokens))
        if self.log_probs is not None:
            if tool:
                self.log_probs.extend([0.0] * len(tokens))
            elif log_probs is None:
                self.log_probs = None
            else:
                self.log_probs.extend(log_probs)


def _device(backend: Any) -> torch.device:
    model = getattr(backend, "model", None)
    if isinstance(model, torch.nn.Module):
        return next(model.parameters()).device
    return getattr(backend, "_device", torch.device("cpu"))


def reset_tool_stats(backend: GenerationBackend) -> None:
    """Start a step's count of tool calls (when ``backend`` is a :class:`ToolBackend`)."""
    if isinstance(backend, ToolBackend):
        backend.stats.reset()


def tool_metrics(backend: GenerationBackend, dist: Distributed) -> dict[str, float]:
    """The step's ``tools/*`` metrics when ``backend`` is a :class:`ToolBackend` (every rank must call it); ``{}``
    otherwise."""
    return backend.stats.metrics(dist) if isinstance(backend, ToolBackend) else {}
