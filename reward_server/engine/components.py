"""The reward components: what each one scores, where it runs (:class:`Where`), and the table of them
(:data:`REGISTRY`).

Each component returns a :class:`~reward_server.verifiers.base.ComponentScore`. It says where it runs: the
worker pool (math ``accuracy``, ``format``, ``repetition``: one hand-off per group, under each item's
deadline), a server thread (``language``), the sandbox (code ``accuracy``), the model workers
(``reward_model``) or the event loop (constant-time ones). :mod:`reward_server.engine.dispatch` sends each
there.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reward_server.engine.context import ScoringContext
from reward_server.engine.reward_models import ModelCatalog
from reward_server.schemas.code import CodeAccuracyParams
from reward_server.schemas.format import FormatParams
from reward_server.schemas.language import LanguageParams
from reward_server.schemas.math import MathOptionsModel
from reward_server.schemas.reward_model import RewardModelParams
from reward_server.schemas.rewards import RewardItem
from reward_server.schemas.shaping import CosineParams, OverlongParams, RepetitionParams
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.code import code_options, score_code
from reward_server.verifiers.format import score_format
from reward_server.verifiers.language import score_language
from reward_server.verifiers.math import verify_payload
from reward_server.verifiers.math.judge import judge_answer, reference_is_prose
from reward_server.verifiers.reward_model import normalize_score
from reward_server.verifiers.shaping import score_cosine, score_overlong, score_repetition


class AccuracyParams(BaseModel):
    """Parameters of the ``accuracy`` component (beside ``weight``)."""

    model_config = ConfigDict(extra="forbid")

    math: MathOptionsModel | None = Field(None, description="Math verification options.")
    code: CodeAccuracyParams | None = Field(None, description="Code options: language, extraction, limits.")
    judge: bool = Field(
        False,
        description="Math: ask the judge model (RLVR_JUDGE_URL) about the answers the rules refuse and the references "
        "that are prose; answers the rules accept never reach it. A judge failure is grader_error (null).",
    )


@dataclass(frozen=True, slots=True)
class ItemFields:
    """What a component that runs away from the request (in a worker process or a thread) sees of its item:
    the fields of :class:`RewardItem` that scoring reads, without the rest (code tests, ids)."""

    response: str
    task: str = "math"
    num_tokens: int | None = None
    language: str | None = None
    prompt: str | None = None
    ground_truth: str | None = None
    truncated: bool = False

    @classmethod
    def of(cls, item: RewardItem) -> ItemFields:
        return cls(
            item.response, item.task, item.num_tokens, item.language, item.prompt, item.ground_truth, item.truncated
        )

    def as_tuple(self) -> tuple[Any, ...]:
        """The fields in order, as the worker pool sends them (``ItemFields(*t)`` rebuilds them)."""
        return (
            self.response,
            self.task,
            self.num_tokens,
            self.language,
            self.prompt,
            self.ground_truth,
            self.truncated,
        )


@dataclass(frozen=True)
class ItemContext:
    """What an :attr:`Where.ASYNC` component sees of the item it scores."""

    item: RewardItem
    ctx: ScoringContext
    done: Mapping[str, ComponentScore]


class Where(enum.StrEnum):
    """Where a component's work runs. Nothing that costs CPU in the completion's length runs on the event
    loop (issue 14): a 100k-character completion takes tens of milliseconds to read."""

    INLINE = "inline"  # constant time (a length, another component's verdict): on the event loop
    WORKER = "worker"  # a pure function of the item: in the worker pool, in the item's group hand-off,
    #                    under the item's deadline, on every core
    THREAD = "thread"  # needs this process's state (the language models): one server thread per batch
    ASYNC = "async"  # waits on I/O (the code sandbox): one coroutine per item


ScoreFn = Callable[[ItemFields, Any, Mapping[str, ComponentScore]], ComponentScore]
ComponentFn = Callable[[ItemContext, Any], Awaitable[ComponentScore]]


@dataclass(frozen=True)
class Component:
    """A named reward component.

    Attributes:
        params: pydantic model of its parameters (``extra="forbid"``); ``weight`` is handled by the composer.
        where: where it runs (:class:`Where`). ``score`` is the work for ``INLINE``, ``WORKER`` and
            ``THREAD``: ``(item_fields, params, done) -> ComponentScore``, a module-level function (a worker
            imports it by name). ``run`` is the work for ``ASYNC``: ``async (item_context, params) ->
            ComponentScore``. ``accuracy`` has both: ``score`` for math items (in the pool), ``run`` for
            code items (on the sandbox).
        needs: components whose results it reads (``cosine`` reads ``accuracy``); they run first. Only an
            ``INLINE`` component may need others.
        neutral: statuses under which the component *abstains* rather than fails, with the score counted
            in the reward instead. Language abstains on a chain of thought too short to judge
            (``too_short``) and counts it as consistent (1.0): the sample is neither flagged nor dropped.
    """

    name: str
    description: str
    params: type[BaseModel]
    where: Where
    score: ScoreFn | None = None
    run: ComponentFn | None = None
    needs: tuple[str, ...] = ()
    neutral: Mapping[str, float] = field(default_factory=dict)

    def where_for(self, task: str) -> Where:
        """Where this component runs for an item of ``task`` (code accuracy waits on the sandbox)."""
        return Where.ASYNC if task == "code" and self.run is not None else self.where


def _math_accuracy(item: ItemFields, params: AccuracyParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    # In a worker: verify_payload keeps the worker's cache of parsed references (a group parses it once).
    assert item.ground_truth is not None  # enforced when the batch is validated
    options = params.math.model_dump(exclude={"timeout_s"}) if params.math is not None else {}
    v = verify_payload(
        {"response": item.response, "ground_truth": item.ground_truth, "options": options, "truncated": item.truncated}
    )
    info: dict[str, Any] = {"extracted_answer": v["extracted_answer"], "ground_truth_parsed": v["ground_truth_parsed"]}
    if v["correct"] is not None:
        info["correct"] = v["correct"]
    if params.judge and v["status"] == "invalid_ground_truth" and reference_is_prose(v["detail"]):
        # The judge reads what the rules cannot: give it the response's answer (the rules stopped at the reference).
        info["extracted_answer"] = judge_answer(item.response, truncated=item.truncated)
    return ComponentScore(v["reward"], v["status"], v["detail"], info)


async def _code_accuracy(ic: ItemContext, params: AccuracyParams) -> ComponentScore:
    if ic.ctx.sandbox is None:
        return ComponentScore(
            None, "sandbox_error", ic.ctx.sandbox_unavailable or "code execution is not available on this server"
        )
    assert ic.item.tests is not None  # enforced when the batch is validated
    options = code_options(params.code or CodeAccuracyParams(), ic.ctx.code_limits, ic.ctx.code_max_limits)
    return await score_code(ic.item.response, ic.item.tests.to_spec(), options, ic.ctx.sandbox)


def _format(item: ItemFields, params: FormatParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_format(item.response, params)


def _language(item: ItemFields, params: LanguageParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_language(item.response, params, target=item.language, prompt=item.prompt)


def _overlong(item: ItemFields, params: OverlongParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_overlong(item.response, params, num_tokens=item.num_tokens)


def _cosine(item: ItemFields, params: CosineParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    accuracy = done["accuracy"]
    # Math states correctness; for code, correct means every test passed.
    correct = accuracy.info.get("correct", None if accuracy.score is None else accuracy.score == 1.0)
    result = score_cosine(item.response, params, correct=correct, num_tokens=item.num_tokens)
    if result.score is None:
        # Say why accuracy gave no verdict, so the cosine row alone explains itself.
        return replace(
            result, detail=f"{result.detail}: accuracy is {accuracy.status} ({accuracy.detail or 'no detail'})"
        )
    return result


def _repetition(item: ItemFields, params: RepetitionParams, done: Mapping[str, ComponentScore]) -> ComponentScore:
    return score_repetition(item.response, params)


def reward_model_problem(params: RewardModelParams, catalog: ModelCatalog) -> str | None:
    """Why ``reward_model`` with ``params`` cannot run on this server (no model, a label it lacks, a
    normalisation it cannot do), else ``None``."""
    why = catalog.reason("reward_model")
    if why is not None:
        return f"the reward_model component is unavailable: {why}"
    info = catalog.infos["reward_model"]
    if params.label >= info.num_labels:
        return f"label {params.label} is out of range: the reward model has {info.num_labels} label(s)"
    if params.normalize == "softmax" and info.num_labels < 2:
        return "softmax over a single label is always 1: use sigmoid"
    if params.normalize == "standardize" and None in (
        params.mean if params.mean is not None else info.mean,
        params.std if params.std is not None else info.std,
    ):
        return "standardize needs mean and std: give them, or use a model whose config.json has them"
    return None


async def _reward_model(ic: ItemContext, params: RewardModelParams) -> ComponentScore:
    models = ic.ctx.reward_models
    problem = reward_model_problem(params, ic.ctx.models)
    if problem is not None or models is None:  # validation turns these into a 422 first
        return ComponentScore(None, "unavailable", problem or "the reward models are not running")
    info = ic.ctx.models.infos["reward_model"]
    [outcome] = await models.score("sequence", [(ic.item.prompt, ic.item.response, params.scope, None)])
    if outcome.status != "ok":
        return ComponentScore(None, outcome.status, outcome.detail)
    score = normalize_score(
        outcome.value,
        label=params.label,
        normalize=params.normalize,
        mean=params.mean if params.mean is not None else info.mean,
        std=params.std if params.std is not None else info.std,
    )
    info_out: dict[str, Any] = {"logits": outcome.value}
    if outcome.truncated_tokens:
        info_out["truncated_tokens"] = outcome.truncated_tokens
    return ComponentScore(score, "ok", None, info_out)


REGISTRY: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "accuracy",
            "Is the answer right? Math: final-answer equivalence (1/0). Code: share of tests passed.",
            AccuracyParams,
            Where.WORKER,
            score=_math_accuracy,
            run=_code_accuracy,
        ),
        Component(
            "format",
            "R1 layout: <think>...</think> then the answer (1.0 exactly).",
            FormatParams,
            Where.WORKER,
            score=_format,
        ),
        Component(
            "language",
            "Share of the chain of thought's words in the target language (DeepSeek-R1).",
            LanguageParams,
            Where.THREAD,
            score=_language,
            neutral={"too_short": 1.0},
        ),
        Component(
            "overlong", "DAPO soft overlong punishment, in [-1, 0].", OverlongParams, Where.INLINE, score=_overlong
        ),
        Component(
            "cosine",
            "Length-scaled reward by correctness (Yeo et al. 2025).",
            CosineParams,
            Where.INLINE,
            score=_cosine,
            needs=("accuracy",),
        ),
        Component(
            "repetition",
            "n-gram repetition penalty, in [max_penalty, 0].",
            RepetitionParams,
            Where.WORKER,
            score=_repetition,
        ),
        Component(
            "reward_model",
            "A sequence-classification reward model's score (RLVR_REWARD_MODEL_PATH; DeepSeek-R1 phase 4).",
            RewardModelParams,
            Where.ASYNC,  # waits on the model workers (reward_server.engine.reward_models)
            run=_reward_model,
        ),
    )
}
assert all(not c.needs or c.where is Where.INLINE for c in REGISTRY.values()), "only INLINE components may need"
