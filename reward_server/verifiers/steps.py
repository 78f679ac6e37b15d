"""Step rewards for process supervision (DeepSeekMath, arXiv 2402.03300, section 4.1.3): split a completion's
reasoning into steps and score each one.

Splitting: the reasoning is the text inside the think block (``<think>`` ... ``</think>``; from the start when
only the closing tag is there, as with a prefilled ``<think>``; to the end when only the opening one is), or the
whole completion without one (``scope="response"`` always takes the whole completion). It is cut at every
``separator`` (default a blank line); each step's span is trimmed of surrounding whitespace and empty steps are
dropped. Spans are ``[start, end)`` offsets, in characters (Unicode code points), into the completion exactly as
it was sent, so a trainer can map them to its tokens.

Rule-based step scoring (:func:`score_arithmetic_step`): every arithmetic claim ``a op b [op c ...] = d`` in a
step is checked exactly (rational arithmetic, usual precedence, ``+ - * / × ÷`` and ``x`` between numbers). A
step whose claims all hold scores 1 (``ok``), one with a false claim 0 (``wrong``). A step with no claim to check
scores ``null`` with status ``no_claim``: that is the neutral choice, since a process-supervised trainer leaves a
null step out of the group's statistics and it adds nothing to any token's advantage, neither reward nor penalty.

Pure functions: no HTTP, no settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from reward_server.verifiers.base import ComponentScore

Scope = Literal["reasoning", "response"]

_NUM = r"-?\d+(?:\.\d+)?"
_OP = r"[-+*/×÷x]"
_EXPR = rf"{_NUM}(?:[ \t]*{_OP}[ \t]*{_NUM})*"
#: A claim: expressions joined by ``=``, not glued to a word or a longer number on either side.
CLAIM_RE = re.compile(rf"(?<![\w.]){_EXPR}(?:[ \t]*=[ \t]*{_EXPR})+(?![\w]|\.\d)")
_TOKEN_RE = re.compile(rf"{_NUM}|{_OP}")


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a completion: ``response[start:end]``."""

    start: int
    end: int


def reasoning_span(response: str, think_tag: str = "think") -> tuple[int, int]:
    """``[start, end)`` of the reasoning: inside the think block, or the whole response without one."""
    opening, closing = f"<{think_tag}>", f"</{think_tag}>"
    open_at = response.find(opening)
    start = open_at + len(opening) if open_at >= 0 else 0
    close_at = response.find(closing, start)
    if open_at < 0 and close_at < 0:
        return 0, len(response)
    return start, close_at if close_at >= 0 else len(response)


def split_steps(response: str, separator: str = "\n\n", scope: Scope = "reasoning") -> list[Step]:
    """The steps of ``response``, in order, as trimmed non-empty spans.

    Raises:
        ValueError: an empty separator.
    """
    if not separator:
        raise ValueError("the step separator must not be empty")
    lo, hi = reasoning_span(response) if scope == "reasoning" else (0, len(response))
    steps, cursor = [], lo
    while cursor <= hi:
        cut = response.find(separator, cursor, hi)
        end = hi if cut < 0 else cut
        piece = response[cursor:end]
        if piece.strip():
            left = len(piece) - len(piece.lstrip())
            steps.append(Step(cursor + left, cursor + len(piece.rstrip())))
        if cut < 0:
            break
        cursor = cut + len(separator)
    return steps


def _evaluate(expression: str) -> Fraction | None:
    """The value of ``a op b op c ...`` with ``*``/``/`` before ``+``/``-``; ``None`` on a division by zero."""
    tokens = _TOKEN_RE.findall(expression)
    # The tokenizer reads "5 -3" as 5 and -3; an operand right after an operand is a subtraction.
    terms: list[Fraction] = []
    ops: list[str] = []
    expect_number = True
    for tok in tokens:
        if expect_number:
            terms.append(Fraction(tok))
            expect_number = False
        elif re.fullmatch(_NUM, tok):  # "-3" where an operator belongs: minus 3
            ops.append("-")
            terms.append(Fraction(tok[1:]))
        else:
            ops.append(tok)
            expect_number = True
    value_terms: list[Fraction] = [terms[0]]
    signs: list[str] = []
    for op, term in zip(ops, terms[1:], strict=True):
        if op in "*×x":
            value_terms[-1] *= term
        elif op in "/÷":
            if term == 0:
                return None
            value_terms[-1] /= term
        else:
            signs.append(op)
            value_terms.append(term)
    total = value_terms[0]
    for sign, term in zip(signs, value_terms[1:], strict=True):
        total = total + term if sign == "+" else total - term
    return total


def check_claim(claim: str) -> bool:
    """Whether every side of ``a op b = c [= d ...]`` has the same value (a division by zero is false)."""
    values = [_evaluate(side) for side in claim.split("=")]
    return all(v is not None for v in values) and len(set(values)) == 1


def score_arithmetic_step(text: str) -> ComponentScore:
    """Check every arithmetic claim of one step exactly.

    Returns:
        score 1.0 (``ok``) when every claim holds, 0.0 (``wrong``) when one does not (the first false claim in
        ``detail``), ``None`` (``no_claim``) when the step claims nothing checkable. ``info["claims"]`` counts
        the claims checked.
    """
    claims = [m.group(0) for m in CLAIM_RE.finditer(text)]
    if not claims:
        return ComponentScore(None, "no_claim", "no arithmetic claim (a op b = c) to check", {"claims": 0})
    false = [c for c in claims if not check_claim(c)]
    if false:
        return ComponentScore(0.0, "wrong", f"false: {false[0]}", {"claims": len(claims), "false": len(false)})
    return ComponentScore(1.0, "ok", None, {"claims": len(claims)})
