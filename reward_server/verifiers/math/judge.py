"""The judge model's side of math verification, without HTTP: the prompt it is asked and the reading of its answer.

A judge (a generative verifier: TinyV, xVerify, CompassVerifier) is an *add-on* to the rule path, as in TinyV
(Xu et al. 2025, arXiv 2505.14625, section 5): it is asked only where the rules refuse an answer or cannot read
the reference, and a right answer the rules accept never reaches it. :mod:`reward_server.engine.judge` sends the
prompts this module builds and reads the replies with :func:`parse_judge_reply`.

The three verifier families are each trained to end their reply with their own label:

========================  ====================  =====================================================
``judge_prompt``          the model writes      meaning
========================  ====================  =====================================================
``tinyv``                 ``True`` / ``False``  the answer equals the reference / it does not
``xverify``               ``Correct`` /         the same
                          ``Incorrect``
``compassverifier``       ``A`` / ``B`` / ``C`` correct / incorrect / invalid (cut off, repeated, a
                                                refusal): an invalid response is wrong, reward 0
========================  ====================  =====================================================

:func:`parse_judge_reply` reads all of them whichever prompt was sent (a deployment may point the server at
another verifier than the one its prompt names): the label must be the whole of the reply's last line (after a
``Final Decision:``-style label, markdown and a trailing full stop are dropped) or the content of its last
``\\boxed{}``. Anything else (two labels, a label inside a sentence such as "the answer is not correct", a
``<think>`` never closed, an empty reply) is unparseable: the caller makes it ``grader_error``, never a 0 or a 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from reward_server.verifiers.math.compare import PROSE_REFERENCE, UNREAD_REFERENCE
from reward_server.verifiers.math.extract import extract_final_answer

__all__ = [
    "JudgePrompt",
    "JudgeReply",
    "build_judge_messages",
    "judge_answer",
    "parse_judge_reply",
    "reference_is_prose",
]

JudgePrompt = Literal["tinyv", "xverify", "compassverifier"]

#: The longest answer text given to the judge, in characters: a longer one is cut to its end.
MAX_ANSWER_CHARS = 2000
#: The longest question given to the judge; the judge compares answers, it need not read a whole long prompt.
MAX_QUESTION_CHARS = 4000

# Our own wording of each family's task; the output format is the one each model was trained to write.
_SYSTEM = (
    "You check whether a student's final answer to a question means the same as the reference answer. "
    "Do not solve the question yourself. Forms that differ only in notation (a renamed variable, an interval "
    "written as inequalities, a fraction written another way, units, a sentence around a value) are the same "
    "answer; a different value, a missing or extra part, or an answer that hedges between values is not."
)
_INSTRUCTIONS: dict[str, str] = {
    "tinyv": "Reply with one word on the last line: True if the student's answer is equivalent to the reference "
    "answer, False otherwise.",
    "xverify": "Reply with one word on the last line: Correct if the student's answer is equivalent to the "
    "reference answer, Incorrect otherwise.",
    "compassverifier": "Reply with one letter on the last line: A if the student's answer is equivalent to the "
    "reference answer, B if it is not, C if the response is invalid (cut off, repeating itself, or refusing).",
}

_LABELS: dict[str, bool] = {
    "true": True,
    "false": False,
    "correct": True,
    "incorrect": False,
    "a": True,
    "b": False,
    "c": False,  # CompassVerifier's INVALID: the response is cut off, repeats itself or refuses: wrong
}


def _clip_end(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def build_judge_messages(
    question: str | None, reference: str, answer: str, prompt: JudgePrompt = "tinyv"
) -> list[dict[str, str]]:
    """The chat messages that ask the judge whether ``answer`` equals ``reference``.

    Args:
        question: the item's prompt, or ``None`` when the request gave none (the judge then compares the two
            answers alone); cut to its last :data:`MAX_QUESTION_CHARS` characters.
        reference: the reference answer, as the request gave it.
        answer: the response's final answer (:func:`judge_answer`), cut to its last :data:`MAX_ANSWER_CHARS`.
        prompt: which label the judge is asked for (see the module docstring).

    Returns:
        OpenAI chat ``messages``: a system message and one user message.
    """
    question_text = _clip_end(question.strip(), MAX_QUESTION_CHARS) if question and question.strip() else "(not given)"
    user = (
        f"Question:\n{question_text}\n\n"
        f"Reference answer:\n{reference.strip()}\n\n"
        f"Student's final answer:\n{_clip_end(answer.strip(), MAX_ANSWER_CHARS)}\n\n"
        f"{_INSTRUCTIONS[prompt]}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """The judge's reply, read.

    Attributes:
        correct: the verdict, or ``None`` when the reply could not be read (``detail`` says why).
        label: the label as the judge wrote it (``True``, ``Incorrect``, ``A`` ...), when one was read.
        detail: why the reply could not be read.
    """

    correct: bool | None
    label: str | None = None
    detail: str | None = None


_BOX = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_PREFIX = re.compile(r"^[A-Za-z][A-Za-z ]{0,40}[:：]\s*")  # "Final Decision:", "Judgement:", "Answer:"
_WRAP = "*_`#'\" \t()[]{}"


def _label_of(text: str) -> str | None:
    t = text.strip().strip(_WRAP)
    t = _PREFIX.sub("", t).strip(_WRAP)
    t = t.rstrip(".!").strip(_WRAP)
    t = re.sub(r"^\\text\{(.*)\}$", r"\1", t).strip(_WRAP)
    return t if t.lower() in _LABELS else None


def parse_judge_reply(reply: str) -> JudgeReply:
    """Read a judge's reply (any of the three label families, see the module docstring).

    Args:
        reply: the assistant message's ``content``.

    Returns:
        A :class:`JudgeReply`; ``correct`` is ``None`` when the reply holds no unambiguous label. Never raises.
    """
    text = reply
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    elif "<think>" in text:
        return JudgeReply(None, detail="the judge's reasoning (<think>) never ended: no verdict in its reply")
    boxes = _BOX.findall(text)
    if boxes:
        label = _label_of(boxes[-1])
        if label is None:
            return JudgeReply(None, detail=f"the judge's last box holds no verdict: {boxes[-1][:80]!r}")
        return JudgeReply(_LABELS[label.lower()], label)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return JudgeReply(None, detail="the judge's reply is empty")
    label = _label_of(lines[-1])
    if label is None:
        return JudgeReply(
            None, detail=f"the judge's last line is not True/False, Correct/Incorrect or A/B/C: {lines[-1][-80:]!r}"
        )
    return JudgeReply(_LABELS[label.lower()], label)


def judge_answer(response: str, *, truncated: bool = False) -> str | None:
    """The answer to show the judge for a response whose reference the rules cannot read (prose).

    An explicit final answer (a box, an ``<answer>`` tag, an "answer is" line) if there is one; else, for a
    completion that ended on its own, its last paragraph after the reasoning (a word answer such as "The second
    player wins." is written as a sentence). A ``truncated`` completion without an explicit answer has none.

    Returns:
        The answer text, or ``None`` when there is none to judge.
    """
    extraction = extract_final_answer(response, fallback=False, explicit_only=True)
    if extraction.parts:
        return ", ".join(extraction.parts)
    if truncated:
        return None
    if "</think>" in response:
        text = response.rsplit("</think>", 1)[1]
    elif "<think>" in response:
        return None  # the reasoning never ended
    else:
        text = response
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    return _clip_end(paragraphs[-1], MAX_ANSWER_CHARS) if paragraphs else None


def reference_is_prose(invalid: str | None) -> bool:
    """Whether a reference the rules found ``invalid_ground_truth`` (its ``detail``) is prose a judge may read:
    a sentence or words the rules cannot parse. An empty, placeholder (``None``, ``N/A``) or cut-off reference
    (``\\frac{1}{``) is not: no judge can compare an answer with a value that is missing."""
    return invalid is not None and (invalid == PROSE_REFERENCE or invalid.endswith(UNREAD_REFERENCE))
