"""Comparing a final answer with the reference: the reference, its members and hedges, choices, systems and
times; one member against another (the value checks and math-verify) is :mod:`.members`."""

from __future__ import annotations

import collections
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reward_server.verifiers.math.clauses import NEGATION, _letters, _result_side
from reward_server.verifiers.math.extract import _box_answer, _last_anchor_value
from reward_server.verifiers.math.forms import closing_bracket, split_top_level
from reward_server.verifiers.math.latex_value import SAMPLE_POINTS, latex_value
from reward_server.verifiers.math.members import (
    components,
    has_value,
    inequality_as_interval,
    is_interval,
    member_match,
    mv_equal,
    mv_parse,
)
from reward_server.verifiers.math.renaming import renamed_answer, without_qualifier
from reward_server.verifiers.math.rewrites import degrees_match, label_pair, vector_pair
from reward_server.verifiers.math.sets import sets_match
from reward_server.verifiers.math.text import (
    _ANSWER_LABEL,
    _LEADING_VAR,
    _MC_LETTER,
    _find_boxes,
    _strip_math_delimiters,
    _unwrap_text_commands,
    normalize_answer,
    normalize_unicode,
    parse_number,
    spelled_number_fault,
    strip_presentation,
)
from reward_server.verifiers.math.text_answers import same_phrase, text_reference
from reward_server.verifiers.math.types import MathOptions


@dataclass(frozen=True)
class Reference:
    """A parsed reference answer (cached per worker: a group parses its reference once).

    Attributes:
        raw: the reference as given.
        answer: the final answer text taken out of it (``#### 42`` -> ``42``; last box of a solution).
        kind: ``choice`` (a multiple-choice letter), ``text`` (a word answer), or ``math``.
        members: the values a complete answer must give: one, or several for a list/set/``±`` reference.
        norm: the normalised answer as a whole (tuples, intervals, sets compare as one object).
        letter: the letter of a ``choice`` reference.
        option: for a choice reference that states its option's value (``(D) 12``), that value, parsed.
        labels: per member, the variable it is assigned to (``x = 1, y = 2``), or ``None``.
        invalid: why the reference has no value, or ``None``.
    """

    raw: str
    answer: str
    kind: str
    members: tuple[str, ...]
    norm: str = ""
    letter: str | None = None
    invalid: str | None = None
    option: Reference | None = None
    labels: tuple[str | None, ...] = ()

    @property
    def shown(self) -> str:
        if self.kind == "choice":
            return str(self.letter)
        return ", ".join(self.members) if len(self.members) > 1 else (self.members[0] if self.members else "")


_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def _reference_answer_text(raw: str) -> str:
    """The answer inside a reference: bare, ``$...$``, ``\\boxed{}`` (last), or GSM8K ``#### 42``."""
    text = raw.strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
        return text.splitlines()[0].strip() if text else ""
    boxes = _find_boxes(text)
    if boxes and boxes[-1][2] is None:
        # "\\boxed{W(n) = 1": a closing brace lost in scraped data. Unlike a response, a reference is not cut
        # off by a length limit, so the rest is its answer; if that rest is itself cut off, it does not
        # balance and parse_reference calls the reference invalid.
        return text[text.index("{", boxes[-1][0]) + 1 :].strip()
    if boxes and boxes[-1][2] is not None:
        # A worked solution (MATH): its answer is the last box, plus boxes joined to it.
        ext = _box_answer(text, boxes, liberal=True)
        if ext.parts:
            return ", ".join(ext.parts)
    # "The answer is 42", "Final answer: $\\frac{1}{2}$": the value the sentence states.
    stated = _last_anchor_value(text, value_only=True)
    return stated if stated is not None else text


def _expand_pm(s: str) -> list[str]:
    r"""``\pm 17`` -> ``17``, ``-17``; ``1 \pm \sqrt{2}`` -> ``1 + \sqrt{2}``, ``1 - \sqrt{2}``."""
    m = re.search(r"\\(?:pm|mp)(?![A-Za-z])", s)
    if not m:
        return [s]
    head, tail = s[: m.start()].rstrip(), s[m.end() :].lstrip()
    if not head or head.endswith(("=", "(", ",")):
        plus, minus = head + tail, head + "-" + tail
    else:
        plus, minus = head + "+" + tail, head + "-" + tail
    return _expand_pm(plus) + _expand_pm(minus)


# "(x, y) = (2, 7), (4, 1)": the names of a tuple's components, before the tuples.
_TUPLE_LABEL = re.compile(r"^\(\s*[A-Za-z](?:_\{?\w+\}?)?(?:\s*,\s*[A-Za-z](?:_\{?\w+\}?)?)+\s*\)\s*=\s*(?=[(\[])")


def _labelled_members(answer: str) -> list[tuple[str | None, str]]:
    """The values an answer gives, each with the variable it is assigned to (``x = 5`` -> (``x``, ``5``);
    ``None`` when there is none): split a bare list, unwrap a set ``\\{...\\}``, expand ``±``. Solutions of a
    system listed as groups of assignments (``a=1, b=3; a=2, b=5``) are the tuples ``(1, 3)``, ``(2, 5)``."""
    s = _TUPLE_LABEL.sub("", answer.strip())
    if s.startswith("\\{") and s.endswith("\\}"):
        s = s[2:-2]
    parts = split_top_level(s)
    out: list[tuple[str | None, str]] = []
    for p in parts:
        # "x = 5" gives the value 5; "y = 2x + 3" is an equation and stays one.
        label = None
        m = _LEADING_VAR.match(p)
        if m and not re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", p[m.end() :])):
            label = re.sub(r"[\s{}]|=|\\in$", "", p[: m.end()])
            p = p[m.end() :]
        p = p.strip()
        out.extend((label, x.strip()) for x in _expand_pm(p) if x.strip())
    return _grouped(out)


def _grouped(labelled: list[tuple[str | None, str]]) -> list[tuple[str | None, str]]:
    """Assignments that repeat one list of variables (``a, b, a, b``) as tuples, one per repetition."""
    labels = [label for label, _ in labelled]
    if len(labels) < 4 or None in labels:
        return labelled
    width = len(set(labels))
    first = labels[:width]
    if width < 2 or len(set(first)) != width or len(labels) % width:
        return labelled
    if any(labels[i : i + width] != first for i in range(0, len(labels), width)):
        return labelled
    return [
        (None, "(" + ", ".join(value for _, value in labelled[i : i + width]) + ")")
        for i in range(0, len(labelled), width)
    ]


def _value_side(member: str) -> str:
    """An equation chain that ends in a value is that value (``2^{10} = 1024``, ``f(2) = 7``, ``5! = 120``);
    an equation (``y = 2x + 3``) stays one."""
    if "=" not in member:
        return member
    side = _result_side(member)
    return side if side != member.strip() and not _letters(side) else member


def _members(answer: str) -> list[str]:
    """The values an answer gives (:func:`_labelled_members` without the variables)."""
    return [value for _, value in _labelled_members(answer)]


def _is_system(labels: Sequence[str | None]) -> bool:
    """Values assigned to different variables (``x = 1, y = 2``): a solution of a system, not a set.
    Numbered names of one variable (``x_1 = 3, x_2 = 4``) list roots, which may come in any order."""
    if len(labels) < 2 or None in labels or len(set(labels)) != len(labels):
        return False
    bases = {str(label).split("_")[0] for label in labels}
    return len(bases) == len(labels)


def _system_match(ref: Reference, norm: str, options: MathOptions) -> tuple[bool, str | None]:
    """Each variable of the reference's solution must get its value: by name when the answer names the
    variables (in any order), else in the reference's order (``(1, 2)`` or ``1, 2`` for ``x=1, y=2``)."""
    answer = _labelled_members(norm)
    if len(answer) == 1 and answer[0][0] is None:
        parts = components(answer[0][1])
        if parts is not None and parts[0].startswith("()"):
            answer = [(None, p) for p in parts[1]]
    if len(answer) != len(ref.members):
        return False, f"the reference gives {len(ref.members)} variables; the answer gives {len(answer)} values"
    if None not in (label for label, _ in answer):
        by_label = dict(answer)
        if set(by_label) != set(ref.labels):
            return False, "the answer assigns other variables than the reference"
        pairs = [(value, by_label[label]) for label, value in zip(ref.labels, ref.members, strict=True)]
    else:
        if any(a is not None and a != r for (a, _), r in zip(answer, ref.labels, strict=True)):
            return False, "the answer assigns other variables than the reference"
        pairs = [(value, a) for value, (_, a) in zip(ref.members, answer, strict=True)]
    return all(member_match(g, a, options) for g, a in pairs), None


# Longest final answer compared (unless the reference is long too).
_MAX_ANSWER_CHARS = 1000

_CHOICE_TOKEN = re.compile(r"(?<![A-Za-z\\])\(?([A-J])\)?(?![A-Za-z])")


def _choice_letters(s: str) -> set[str]:
    """Every choice letter an answer names: "(C) or (D)" names two, a hedge."""
    return set(_CHOICE_TOKEN.findall(_unwrap_text_commands(s)))


_LETTER_LIST = (
    r"\(?[A-J]\)?(?:\s*(?:,|\bor\b|\bnor\b|\band\b|\bou\b|\boder\b|\bo\b|\bni\b|或|\bи\b|\bили\b)\s*\(?[A-J]\)?)*"
)
_NEGATED = re.compile(
    rf"{NEGATION}\s*(?:(?:be|option|choice|answer)\s+)?({_LETTER_LIST})(?![A-Za-z])"
    r"|(?<![A-Za-z])\(?([A-J])\)?\s*(?:ではなく|じゃなく|[가이]\s*아니라)",
    re.IGNORECASE,
)


def _negated_letters(s: str) -> set[str]:
    """The choice letters an answer rules out: "C, not A or D" rules out A and D."""
    out: set[str] = set()
    for m in _NEGATED.finditer(_unwrap_text_commands(s)):
        out |= set(_CHOICE_TOKEN.findall(m.group(1) or m.group(2)))
    return out


# A letter in any font: "\mathbb{C}", "\mathcal{B}", "\textbf{D}" name the letter when a choice is expected.
_ANY_FONT_LETTER = re.compile(r"\\(?:math[a-z]+|boldsymbol|bm|text[a-z]*)\s*\{\s*([A-Za-z])\s*\}")


_TEX_SPACE = re.compile(r"\\[,;:!> ]|\\q?quad(?![A-Za-z])|~")
_OPTION_WORD = re.compile(r"^\s*(?:option|choice)\s+(?=\(?[A-J]\b)", re.IGNORECASE)


def _choice_split(s: str) -> tuple[str, str] | None:
    r"""A choice letter and the option's text after it: ``(D) 12`` -> (``D``, ``12``); ``B`` -> (``B``, ``""``).

    ``\textbf{(D)}\ 12`` (AMC), ``B. 12``, ``C) 14``, ``option B`` all name a letter; ``A = 5`` or ``B^2`` do not.
    """
    s = _ANSWER_LABEL.sub("", _TEX_SPACE.sub(" ", _unwrap_text_commands(s.strip())))
    s = _OPTION_WORD.sub("", s.strip().strip("*").strip().rstrip(".").strip())
    m = _MC_LETTER.match(s)
    if not m:
        return None
    letter = m.group(1) or m.group(2)
    rest = s[m.end(1) if m.group(1) else m.end(2) :]
    if re.match(r"^\s*\)?\s*[.:]?\s*$", rest):
        return letter, ""
    option = re.match(r"^\s*(?:\)\s*[.:]?|[.:])\s+(\S.*)$", rest, re.DOTALL)
    if option is None and m.group(2):
        # "C Cecile", "A Peter\n...": a letter, then the option's text, a name, on the first line.
        option = re.match(r"^[ \t]+([A-Z][\w'’-]*)[ \t]*(?:\n|$)", rest)
    return (letter, option.group(1).strip()) if option else None


def _choice_letter(s: str) -> str | None:
    split = _choice_split(s)
    return split[0] if split else None


def _looks_like_prose(s: str) -> bool:
    words = re.findall(r"[A-Za-z]{2,}", _unwrap_text_commands(s))
    latex_cmds = re.findall(r"\\[A-Za-z]+", s)
    return len(words) >= 4 and len(latex_cmds) <= len(words) // 4


#: ``Reference.invalid`` for a reference that is a sentence or words the rules cannot read: a judge model may
#: (:mod:`reward_server.verifiers.math.judge`); an empty, placeholder or cut-off reference is never judged.
PROSE_REFERENCE = "the reference is prose, not an answer"
UNREAD_REFERENCE = "cannot be parsed"


def parse_reference(raw: str, options: MathOptions | None = None) -> Reference:
    """Parse a reference answer once: extract its answer, classify it, and parse its members.

    Accepts a bare answer (``42``, ``\\frac{1}{2}``), one in ``$...$``, in ``\\boxed{}``, a worked
    solution ending in a box, or a GSM8K solution ending in ``#### 42``. Never raises: a reference without
    a value is returned with ``invalid`` set.
    """
    options = options or MathOptions()
    answer_text = _reference_answer_text(raw)
    if not answer_text.strip():
        return Reference(raw, "", "math", (), invalid="the reference answer is empty")
    if _PLACEHOLDER.fullmatch(_unwrap_text_commands(_strip_math_delimiters(answer_text)).strip()):
        # What a data pipeline writes for a missing value (str(None), NaN): no answer to compare with, and
        # a response that writes the same placeholder must not be paid.
        return Reference(raw, answer_text, "math", (), invalid=f"the reference {answer_text!r} is a placeholder")
    choice = _choice_split(normalize_unicode(_strip_math_delimiters(answer_text)))
    if choice is not None:
        letter, option_text = choice
        # "$\textbf{(D)}\ 12$": the letter, and the option's value, which an answer may give instead.
        option = parse_reference(option_text, options) if option_text else None
        if option is not None and (option.invalid or option.kind == "choice"):
            option = None
        return Reference(raw, answer_text, "choice", (letter,), letter=letter, option=option)
    if (spelled := spelled_number_fault(strip_presentation(answer_text))) is not None:
        return Reference(raw, answer_text, "math", (), invalid=f"the reference is {spelled}")
    norm = normalize_answer(answer_text)
    if not norm:
        return Reference(raw, answer_text, "math", (), invalid="the reference answer is empty")
    phrase = text_reference(answer_text)
    if _looks_like_prose(norm):
        if phrase is not None:  # "The second player wins.": compared on "the second player"
            return Reference(raw, answer_text, "text", (phrase,), norm)
        return Reference(raw, answer_text, "math", (), invalid=PROSE_REFERENCE)
    labelled = [(label, _value_side(value)) for label, value in _labelled_members(norm)]
    members = [value for _, value in labelled]
    if _is_word_answer(norm):
        return Reference(raw, answer_text, "text", (phrase or _unwrap_text_commands(norm).strip().lower(),), norm)
    if (fault := _malformed(norm)) is not None:
        return Reference(raw, answer_text, "math", (), invalid=f"the reference {answer_text[:80]!r} {fault}")
    if not _has_a_value(members, norm):
        plain = _unwrap_text_commands(norm).strip()
        if re.fullmatch(r"[A-Za-z][A-Za-z '\-]{0,40}", plain) and len(plain.split()) <= 3:
            return Reference(raw, answer_text, "text", (phrase or plain.lower(),), norm)
        if phrase is not None:
            return Reference(raw, answer_text, "text", (phrase,), norm)
        return Reference(raw, answer_text, "math", (), invalid=f"the reference {answer_text[:80]!r} {UNREAD_REFERENCE}")
    labels = tuple(label for label, _ in labelled)
    return Reference(raw, answer_text, "math", tuple(members), norm, labels=labels)


# An operator or an opening that still waits for its operand: "3+", "x=", "2^", "\\frac". A sign after "^" is
# a one-sided limit ("0^+"), which is complete.
_DANGLING_END = re.compile(r"(?:(?<!\^)[+\-]|[*/=^_({\[\\]|\\(?:frac|sqrt|cdot|times|div|pm))\s*$")


def _malformed(norm: str) -> str | None:
    """Why a reference with digits or operators is not a well-formed expression, or ``None``.

    Cut-off references (``\\frac{1}{``, ``(1,``, ``3+``) happen when a data pipeline truncates a field. They
    must be ``invalid_ground_truth``, not a reference that every answer fails: that would silently teach
    the policy that its right answers are wrong. Escaped braces (``\\{1, 2\\}``) are set braces and are
    counted apart; intervals mix brackets (``[0, 1)``), so only the totals of openers and closers are compared.
    """
    depth = 0
    for m in re.finditer(r"\\[{}]|[{}]", norm):
        if len(m.group()) == 1:
            depth += 1 if m.group() == "{" else -1
            if depth < 0:
                return "closes a brace it never opened"
    if depth:
        return "leaves a brace open"
    if norm.count("\\{") != norm.count("\\}"):
        return "leaves a set brace open"
    if norm.count("(") + norm.count("[") != norm.count(")") + norm.count("]"):
        return "has unbalanced parentheses or brackets"
    if _DANGLING_END.search(norm):
        return "ends in an operator that has no operand"
    return None


_PLACEHOLDER = re.compile(r"none|null|nil|nan|n/?a|tbd|\?+|-+|_+", re.IGNORECASE)

_MATHY = re.compile(r"\d|\\(?:frac|sqrt|pi|infty|begin|cup|cap|le|ge|ne|pm|sin|cos|tan|log|ln)(?![A-Za-z])|[=^_<>]")


def _has_a_value(members: list[str], norm: str) -> bool:
    """Does the reference hold a value? Cheap checks first; sympy only for what they cannot read."""
    if any(parse_number(m) is not None or latex_value(m, SAMPLE_POINTS[0]) is not None for m in members):
        return True
    if _MATHY.search(norm):
        return True  # digits, operators or math commands: an expression, a set, an interval, a matrix
    if any(has_value(mv_parse(m, gold=True)) for m in members):
        return True
    return len(members) > 1 and has_value(mv_parse(norm, gold=True))


def _is_word_answer(norm: str) -> bool:
    plain = _unwrap_text_commands(norm).strip()
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z '\-]{2,40}", plain)) and "\\" not in plain and len(plain.split()) <= 3


def _distinct(members: Sequence[str]) -> list[str]:
    """Drop repeats (the same number, or the same text up to spacing): "7, 007" is one value."""
    out: list[str] = []
    seen: set[object] = set()
    for m in members:
        n = parse_number(m)
        key: object = n.value if n is not None else re.sub(r"\s+", "", m)
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


def _same_word(a: str, b: str) -> bool:
    """Word answers compare without case, spacing or an English plural ending: "Apples" is "apple"."""
    a, b = re.sub(r"\s+", " ", a).strip(), re.sub(r"\s+", " ", b).strip()
    short, long = sorted((a, b), key=len)
    return a == b or (len(short) >= 3 and long in (short + "s", short + "es"))


# A time of day: "3:00 PM", "3 p.m.", "15:00", "\text{9:30 a.m.}".
_CLOCK = re.compile(r"^(\d{1,2})(?::([0-5]\d))?\s*(?:([ap])\.?\s*m\.?)?$", re.IGNORECASE)


def _clock_minutes(s: str) -> tuple[int, bool] | None:
    """A time of day as (minutes after midnight, whether it has an a.m./p.m. mark), or ``None``.

    Without a mark the clock is read as 24-hour (``15:00``; ``3:00`` is 3 a.m.); a bare number is no time.
    """
    plain = _unwrap_text_commands(normalize_unicode(_strip_math_delimiters(s))).replace("$", "")
    m = _CLOCK.match(re.sub(r"\\[,;: ]|~|\\q?quad|\s+", " ", plain).strip())
    if m is None or not (m.group(2) or m.group(3)):
        return None
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    if m.group(3):
        if not 1 <= hour <= 12:
            return None
        return (hour % 12 + (12 if m.group(3).lower() == "p" else 0)) * 60 + minute, True
    return (hour * 60 + minute, False) if hour <= 24 else None


def _clock_match(ref: Reference, answer: str) -> tuple[bool, str | None] | None:
    """The verdict when a time of day is compared (a.m./p.m. on either side), else ``None``.

    Unit stripping would read "3:00 PM" as "3:00", so 3 a.m. would pass for 3 p.m.: times compare as times.
    """
    ref_clock, ans_clock = _clock_minutes(ref.answer), _clock_minutes(answer)
    if ref_clock is None or not (ref_clock[1] or (ans_clock is not None and ans_clock[1])):
        return None
    if ans_clock is None:
        return False, "the reference is a time of day; the answer is not one"
    return ref_clock[0] == ans_clock[0], None


def answers_match(ref: Reference, answer: str, options: MathOptions) -> tuple[bool, str | None]:
    """Does ``answer`` (an extracted final answer) equal the reference? Returns (verdict, detail)."""
    if ref.kind == "math":
        plain_ref = strip_presentation(ref.answer)
        plain_answer = strip_presentation(answer)
        if (same_angle := degrees_match(plain_ref, plain_answer)) is not None:
            return same_angle, "compared as angles in degrees and minutes"
        if (same_set := sets_match(plain_ref, plain_answer, _set_endpoint)) is not None:
            return same_set, "compared as sets of real numbers"
    verdict = _answers_match(ref, answer, options)
    if verdict[0] or ref.kind != "math" or len(answer) > max(_MAX_ANSWER_CHARS, 4 * len(ref.answer)):
        return verdict
    rescued = _other_form_match(ref, normalize_answer(answer, mixed_and=len(ref.members) == 1), options)
    return rescued if rescued is not None else verdict


@functools.lru_cache(maxsize=1024)
def _rewritten_reference(answer: str, options: MathOptions) -> Reference:
    """A reference rewritten into the answer's form (a vector as a tuple, without its label), parsed once."""
    return parse_reference(answer, options)


def _set_endpoint(s: str) -> Any:
    """An endpoint of an interval as a sympy value (``None`` when it has none)."""
    from sympy import Rational

    num = parse_number(s)
    if num is not None and not num.percent:
        return Rational(num.value.numerator, num.value.denominator)
    return mv_parse(normalize_answer(s), gold=True)


def _other_form_match(ref: Reference, norm: str, options: MathOptions) -> tuple[bool, str | None] | None:
    """A right answer in another form than the reference's (issue 23): renamed variables, a vector for a
    tuple, a labelled expression for a bare one, a family without its ``k \\in \\mathbb{Z}``. ``None`` when no
    such form applies or it does not match."""
    candidates = [(ref, norm)]
    ref_family, ans_family = without_qualifier(ref.norm), without_qualifier(norm)
    if ref_family is not None or ans_family is not None:
        gold = _rewritten_reference(ref_family, options) if ref_family is not None else ref
        if not gold.invalid:
            candidates.append((gold, ans_family if ans_family is not None else norm))
    for gold, answer in candidates:
        if (gold is not ref or answer != norm) and _answers_match(gold, answer, options)[0]:
            return True, "the same family without its integer qualifier"
        if (renamed := renamed_answer(gold.norm, answer)) is not None and _answers_match(gold, renamed, options)[0]:
            return True, "the answer names its variable differently"
        forms = ((vector_pair(gold.norm, answer), "a vector for a tuple"), (label_pair(gold.norm, answer), "a label"))
        for pair, why in forms:
            if pair is not None and pair != (gold.norm, answer):
                other = gold if pair[0] == gold.norm else _rewritten_reference(pair[0], options)
                if not other.invalid and _answers_match(other, pair[1], options)[0]:
                    return True, f"the same answer with {why}"
    return None


def _answers_match(ref: Reference, answer: str, options: MathOptions) -> tuple[bool, str | None]:
    if ref.kind == "choice":
        text = _ANY_FONT_LETTER.sub(r"\1", strip_presentation(answer))
        plain = _unwrap_text_commands(text).strip()
        while plain.startswith("{") and closing_bracket(plain) == len(plain) - 1:
            plain = plain[1:-1].strip()  # "{C}" is what "\textcolor{red}{C}" leaves
        if re.fullmatch(r"\(?[A-Ja-j]\)?", plain):
            text = plain.upper()  # "(c)" names choice C; a lone lower-case letter can be nothing else here
        named = _choice_letters(text)
        if len(named) > 1:
            # "C, not A or D", "B。不是 A": one choice named, the others ruled out.
            kept = named - _negated_letters(text)
            if len(kept) == 1:
                return kept == {ref.letter}, "the answer names one choice and rules out the others"
            return False, f"the answer names {len(named)} choices ({', '.join(sorted(named))}): a hedge"
        letter = _choice_letter(text)
        if letter is None:
            if ref.option is not None and not named:
                # The reference states its option's value ("(D) 12"): the value is that choice.
                return answers_match(ref.option, answer, options)
            # "\boxed{12}" for a bare letter reference: not a letter, so not the choice.
            return False, "the reference is a multiple-choice letter; the answer is not a letter"
        return letter == ref.letter, None
    labelled = _choice_split(normalize_unicode(_strip_math_delimiters(answer)))
    if labelled is not None and labelled[1]:
        answer = labelled[1]  # "(A) \frac{1}{2}" for a value reference: the option's value is the answer
    if len(answer) > max(_MAX_ANSWER_CHARS, 4 * len(ref.answer)):
        # A degenerate answer ("1+1+...+1", a looping sentence in a box) is wrong, not a sympy job.
        return False, f"the final answer is {len(answer)} characters long; answers this long are not compared"
    if (clock := _clock_match(ref, answer)) is not None:
        return clock
    norm = normalize_answer(answer, mixed_and=len(ref.members) == 1)
    if ref.kind == "text":
        plain = _unwrap_text_commands(norm).strip().lower()
        return _same_word(plain, ref.members[0].lower()) or same_phrase(answer, ref.members[0]), None
    members = _distinct([_value_side(m) for m in _members(norm)])
    if not members:
        return False, "the final answer is empty after normalisation"
    if len(ref.members) == 1:
        if len(members) == 1:
            if member_match(ref.members[0], members[0], options):
                return True, None
            converted = _in_reference_angle_unit(ref, answer, members[0])
            if converted is not None and member_match(ref.members[0], converted, options):
                return True, "the answer is the same angle in the other unit (degrees/radians)"
            return False, None
        hedge = f"the final answer gives {len(members)} different values for a single-valued reference"
        intervals = [inequality_as_interval(m) for m in members]
        if is_interval(ref.members[0]) and all(intervals):
            # "x < 2 or x > 3" for "(-\infty, 2) \cup (3, \infty)": a union written as inequalities.
            return member_match(ref.members[0], " \\cup ".join(map(str, intervals)), options), None
        if parse_number(ref.members[0]) is not None or latex_value(ref.members[0]) is not None:
            # A number is never several values: a hedge, decided without sympy (which could hang on one of
            # the values, e.g. "5 or 10^{10^{10}}").
            return False, hedge
        # Several values for a single-valued reference: right only if the answer as a whole is one object
        # equal to it (a tuple or interval written with commas), never as a hedge.
        if mv_equal(mv_parse(ref.norm, gold=True), mv_parse(norm, gold=False), options):
            return True, None
        return False, hedge
    if _is_system(ref.labels):
        return _system_match(ref, norm, options)
    # A list/set/± reference: all of its members, in any order, and nothing else.
    if len(members) != len(ref.members):
        if len(members) == 1 and mv_equal(mv_parse(ref.norm, gold=True), mv_parse(norm, gold=False), options):
            return True, None
        return False, f"the reference has {len(ref.members)} values; the answer gives {len(members)}"
    return _perfect_matching(ref, members, options), None


_DEGREE_MARK = re.compile(r"\^\s*\{?\s*\\(?:text)?circ|\\(?:text)?degree|\\textcirc|°|\bdeg(?:rees?)?\b", re.IGNORECASE)


def _in_reference_angle_unit(ref: Reference, raw_answer: str, answer: str) -> str | None:
    r"""The answer converted to the reference's angle unit, when exactly one side is marked in degrees and
    the other is a multiple of π (radians): ``90^\circ`` is ``\frac{\pi}{2}``. ``None`` otherwise: a bare
    ``90`` is not an angle in degrees, so it never equals ``\frac{\pi}{2}``."""
    ref_degrees = bool(_DEGREE_MARK.search(ref.answer))
    answer_degrees = bool(_DEGREE_MARK.search(raw_answer))
    if ref_degrees == answer_degrees:
        return None
    if ref_degrees and "\\pi" in answer and "\\pi" not in ref.members[0]:
        return f"\\frac{{180 ({answer})}}{{\\pi}}"
    if answer_degrees and "\\pi" in ref.members[0] and "\\pi" not in answer:
        return f"\\frac{{({answer}) \\pi}}{{180}}"
    return None


def _perfect_matching(ref: Reference, members: list[str], options: MathOptions) -> bool:
    # Members written alike pair off first (equality is transitive, so this never loses a matching): a long
    # list in the reference's own words costs a count, not n^2 comparisons.
    unmatched = collections.Counter(members)
    gold: list[str] = []
    for g in ref.members:
        if unmatched[g] > 0:
            unmatched[g] -= 1
        else:
            gold.append(g)
    answer = list(unmatched.elements())
    n = len(answer)
    match_of: dict[int, int] = {}

    def ok(i: int, j: int) -> bool:
        return member_match(gold[i], answer[j], options)

    # Bipartite matching (Kuhn); lists are short.
    edges = [[j for j in range(n) if ok(i, j)] for i in range(n)]

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in match_of or augment(match_of[j], seen):
                match_of[j] = i
                return True
        return False

    return all(augment(i, set()) for i in range(n))
