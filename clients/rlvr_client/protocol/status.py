"""The status vocabulary: why a component, a step or a whole item scored what it did.

One word per outcome, the same on the server (which writes it) and in every client (which reads it). ``ok`` is the
only status that comes with a reward; every other status of an item means "do not train on this", never 0. The
words are kept as plain strings on the wire and in :class:`~rlvr_client.protocol.RewardResult`: a client reads a
status it does not know (from a newer server) as any other non-``ok`` one.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["STATUSES", "STATUS_MEANINGS", "Status", "describe_statuses"]

Status = Literal[
    "ok",
    "no_answer",
    "invalid_ground_truth",
    "timeout",
    "error",
    "cancelled",
    "unavailable",
    "sandbox_error",
    "grader_error",
    "bad_format",
    "too_short",
    "no_target",
    "unsupported_language",
    "no_accuracy",
    "wrong",
    "no_claim",
    "truncated",
]
"""Every status the server writes into a component, a step or an item (see :data:`STATUS_MEANINGS`)."""

STATUSES: frozenset[str] = frozenset(get_args(Status))

#: What each status means, and who writes it.
STATUS_MEANINGS: dict[Status, str] = {
    "ok": "a verdict was reached (the score may still be 0: a wrong answer is a verdict)",
    "no_answer": "the completion holds no final answer or no program (math, code: score 0)",
    "invalid_ground_truth": "the reference has no value (math): no verdict",
    "timeout": "no verdict within the time limit",
    "error": "the verifier or its worker failed",
    "cancelled": "the server stopped scoring the item (its drain ran out of time at shutdown)",
    "unavailable": "the server does not serve this component (a reward model not loaded)",
    "sandbox_error": "the sandbox failed, not the program (code)",
    "grader_error": "the tests cannot be graded: empty or malformed (code); the judge model gave no verdict (math, "
    "with accuracy.judge)",
    "bad_format": "the layout does not hold (format)",
    "too_short": "the chain of thought is too short to tell its language (language; it abstains)",
    "no_target": "no target language given, and none found in the prompt (language)",
    "unsupported_language": "the target language is not one the detector knows (language)",
    "no_accuracy": "a shaping component that needs the accuracy verdict, which could not be scored",
    "wrong": "a step with a false claim (step rewards: score 0)",
    "no_claim": "a step with nothing to check (step rewards: neutral, no score)",
    "truncated": "a step cut off by the reward model's length limit (step rewards)",
}


def describe_statuses() -> str:
    """Every status and its meaning, ``"`ok`: ...; `no_answer`: ..."``, for the server's schema descriptions."""
    return "; ".join(f"`{s}`: {STATUS_MEANINGS[s]}" for s in get_args(Status))
