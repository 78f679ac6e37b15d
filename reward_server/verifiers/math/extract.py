"""Finding the final answer of a completion: the last box, an <answer> tag, an "answer is" line, or the
fallback (the last number or math span)."""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass

from reward_server.schemas.format import DEFAULT_END_OF_TURN_TOKENS, DEFAULT_START_OF_TURN_TOKENS
from reward_server.verifiers.math.forms import closing_bracket, read_number_words
from reward_server.verifiers.math.text import (
    _find_boxes,
    _strip_math_delimiters,
    normalize_unicode,
)

# ---------------------------------------------------------------------------------------- special tokens
# A completion decoded without skipping special tokens ends in an end-of-turn token ("... is 42<|im_end|>"),
# starts with a role header, or carries a token cut in half by the length limit ("<|im_e") or by a decoder that
# lost its first characters ("im_end|>"). None of them is part of the answer. The token lists are the format
# component's (NFKC-folded, as the text is, so "<｜end▁of▁sentence｜>" is "<|end▁of▁sentence|>").
_END_TOKENS = (
    *(unicodedata.normalize("NFKC", t) for t in DEFAULT_END_OF_TURN_TOKENS),
    "<|eom_id|>",
    "<|end_of_turn|>",
    "<end_of_turn>",
)
_START_TOKENS = tuple(unicodedata.normalize("NFKC", t) for t in DEFAULT_START_OF_TURN_TOKENS)
# Names of <|...|> tokens long enough to be recognised without their "<|": "im_end|>", "|eot_id|>".
_TOKEN_NAMES = sorted(
    {m.group(1) for t in _END_TOKENS + _START_TOKENS for m in re.finditer(r"<\|([^|<>]{5,})\|>", t)} | {"eom_id"},
    key=len,
    reverse=True,
)
_SPECIAL_TOKEN = re.compile(
    "|".join(re.escape(t) for t in sorted(set(_END_TOKENS + _START_TOKENS), key=len, reverse=True))
    + r"|<\|[A-Za-z▁][\w▁]{1,40}\|>"  # any other <|name|> token
    + r"|(?<![A-Za-z])\|?(?:"
    + "|".join(re.escape(n) for n in _TOKEN_NAMES)
    + r")\|>"
)
_END_TOKEN_SET = frozenset(_END_TOKENS)
_TOKEN_PREFIXES = frozenset(t[:k] for t in set(_END_TOKENS + _START_TOKENS) for k in range(2, len(t)))


def strip_special_tokens(text: str) -> str:
    """The text without chat-template special tokens, cut at the first end-of-turn token that follows some
    text (what comes after it was never part of the answer: padding, or a turn the model should not have
    written), and without a token cut off at the end ("... 42<|im_e"). Linear in the text's length."""
    if "<" not in text and "|>" not in text:
        return text
    out: list[str] = []
    last = 0
    for m in _SPECIAL_TOKEN.finditer(text):
        out.append(text[last : m.start()])
        last = m.end()
        token = m.group()
        ended = token in _END_TOKEN_SET or not token.startswith("<") or "end" in token or "pad" in token.lower()
        if ended and not token.startswith(("<|im_start", "<|start_header")) and "".join(out).strip():
            last = len(text)
            break
        out.append(" ")
    out.append(text[last:])
    result = "".join(out).rstrip()
    cut = result.rfind("<")
    if cut >= 0 and result[cut:] in _TOKEN_PREFIXES:
        result = result[:cut]
    return result


# What may stand between two boxes of one final answer: "\boxed{2}, \boxed{5} and \boxed{11}", and the
# hedges "\boxed{3} (or maybe \boxed{4})", "\boxed{3}, possibly \boxed{4}": joined, they give two values,
# which is wrong for a single-valued reference. A correction ("\boxed{3}, no wait, \boxed{4}") has other
# words in between and is not joined.
_JOIN_WORDS = r"\b(?:and|or|maybe|perhaps|possibly|alternatively|either)\b"
_BOX_SEPARATOR = re.compile(
    rf"^(?:\s|[,;.$&()]|\\[()\[\]]|\\q?quad|\\text\{{(?:\s|,|{_JOIN_WORDS})*\}}|{_JOIN_WORDS})*$", re.IGNORECASE
)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think\s*>", re.IGNORECASE)
_ANSWER_OPEN = re.compile(r"<answer\s*>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer\s*>", re.IGNORECASE)
# The answer line in the languages policies drift into (the text is NFKC-normalised first, so a full-width
# colon is ':'): "答案是 5", "最终答案：5", "答：12个苹果", "Ответ: 12", "ответ равен 12", "答えは 5", "정답: 5",
# "La réponse est 5", "Réponse : 5", "Die Antwort ist 5", "Respuesta: 5", "A resposta é 5", "La risposta è 5",
# "Jibu: 5", "Jawaban: 5", "উত্তর: 5", "คำตอบ: 5", "సమాధానం: 5", "الإجابة: 5" (the answer prefixes of MGSM and
# multilingual MMLU). These words also occur in prose, so a value must follow (see _last_anchor_value), and
# the value nearest the phrase is the answer ("Réponse : il reste 35 pommes après 3 jours" is 35).
# Each anchor with a word that every text it matches contains (lower-cased), so that a text is only scanned for
# the anchors it can hold: one pass with every language's alternatives would cost several times more per
# character, on every completion.
_ENGLISH_ANCHORS = (
    # "final answer is", "the answer is", "Answer:", "answer =", "answer choice: (C)"
    (
        "answer",
        r"final\s+answers?\s*(?:is|are|:|=|-)?|\banswers?\s*(?:is|are|:|=)|\banswer\s+(?:choice|option)\s*(?:is|:)",
    ),
    ("####", r"^[ \t]*#{4}(?!#)"),
    ("option", r"\b(?:correct|right|best)\s+option\s*(?:is|:)"),  # "the correct option is B"
    ("choice", r"\b(?:correct|right|best)\s+choice\s*(?:is|:)"),
)
_FOREIGN_ANCHORS = (
    (
        "答",
        r"(?:最终答案|最終答案|最後答案|答案|答え|回答|解答|答复|答曰)\s*(?:应该?是|應該?是|应为|應為|为|為|是|は)?|(?<![^\W\d_])答\s*:",
    ),
    ("ответ", r"\bответ(?:ом)?\s*(?::|—|–|-|равен|будет)"),
    ("답", r"(?:정답|답변|답)\s*(?:은|는)?\s*:"),
    ("ponse", r"\br[ée]ponse(?:\s+(?:finale|correcte))?\s*(?:est\s*:?|:|=)"),
    ("antwort", r"\b(?:endgültige\s+)?antwort\s*(?:ist|lautet|:)"),
    ("respuesta", r"\brespuesta(?:\s+(?:final|correcta))?\s*(?:es\s*:?|:)"),
    ("resposta", r"\bresposta(?:\s+(?:final|correta))?\s*(?:é\s*:?|:)"),
    ("risposta", r"\brisposta(?:\s+(?:finale|corretta))?\s*(?:è\s*:?|:)"),
    ("antwoord", r"\bantwoord\s*(?:is|:)"),
    ("odpowied", r"\bodpowied[zź]\s*(?:to|:)"),
    ("cevap", r"\bcevap\s*:"),
    ("đáp án", r"\bđáp án\s*(?:là|:)"),
    ("jibu", r"\bjibu\s*(?:ni|:)"),
    ("jawaban", r"\bjawaban(?:nya)?\s*(?:adalah|:)"),
    ("উত্তর", r"উত্তর\s*[:ঃ]"),
    ("उत्तर", r"उत्तर\s*(?::|है)"),
    ("คำตอบ", r"คำตอบ(?:คือ)?\s*:?"),
    ("సమాధానం", r"సమాధానం\s*:"),
    ("إجابة", r"(?:ال)?إجابة(?:\s+النهائية|\s+الصحيحة)?\s*(?:هي|هو)?\s*:"),
    ("جواب", r"(?:ال)?جواب(?:\s+النهائي)?\s*(?:هو)?\s*:"),
)


@functools.lru_cache(maxsize=256)
def _anchor_pattern(present: frozenset[str]) -> re.Pattern[str] | None:
    english = [p for key, p in _ENGLISH_ANCHORS if key in present]
    foreign = [p for key, p in _FOREIGN_ANCHORS if key in present]
    alternatives = english + ([f"(?P<foreign>{'|'.join(foreign)})"] if foreign else [])
    if not alternatives:
        return None
    return re.compile(f"(?:{'|'.join(alternatives)})\\s*[:=]?", re.IGNORECASE | re.MULTILINE)


def _anchors(text: str) -> list[re.Match[str]]:
    """The answer phrases of the text, in order: "final answer is", "the answer is", "Answer:", "answer =",
    "#### 42", "the correct option is", and the answer line in the languages policies drift into (the text is
    NFKC-normalised first, so a full-width colon is ':'): "答案是 5", "最终答案：5", "答：12个苹果", "Ответ: 12",
    "ответ равен 12", "答えは 5", "정답: 5", "La réponse est 5", "Réponse : 5", "Die Antwort ist 5",
    "Respuesta: 5", "A resposta é 5", "La risposta è 5", "Jibu: 5", "Jawaban: 5", "উত্তর: 5", "คำตอบ: 5",
    "సమాధానం: 5", "الإجابة: 5" (the answer prefixes of MGSM and multilingual MMLU). A match of another
    language has the group ``foreign``: those words also occur in prose, so a value must follow (see
    :func:`_last_anchor_value`), and the value nearest the phrase is the answer."""
    lowered = text.lower()
    present = frozenset(key for key, _ in _ENGLISH_ANCHORS + _FOREIGN_ANCHORS if key in lowered)
    pattern = _anchor_pattern(present) if present else None
    return list(pattern.finditer(text)) if pattern is not None else []


# A choice named as the right one, with the letter first: "Option B is correct", "(C) is the right answer".
_CHOICE_STATEMENT = re.compile(
    r"(?:\b(?:option|choice)\s+\(?([A-J])\)?|\(([A-J])\)|\b([A-J])\b(?=\s+is\s+the\s))\s+is\s+(?:the\s+)?"
    r"(?:correct|right)\b",
    re.IGNORECASE,
)
# Math delimiters, scanned once left to right (a lazy ".+?" per opener is quadratic on unclosed ones).
_DELIMITER = re.compile(r"\\\$|\$\$|\\\[|\\\]|\\\(|\\\)|\$")
_CLOSER = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}
# Not an exponent or subscript: "1,000.99 m^{2}" (also from "m²") ends in the value, not in 2. Only a Latin
# letter or digit makes a number part of a name ("x2"); one glued to CJK text is a number ("比例为13/28").
_NOT_EXPONENT = r"(?<![A-Za-z0-9_.^])(?<!\^\{)(?<!_\{)"
_NUMBER = re.compile(
    _NOT_EXPONENT + r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+(?![\d,])|[1-9]\d?(?:,\d{2})+,\d{3}(?![\d,])"
    r"|[1-9]\d{0,2}(?: \d{3})+(?![\d.])|\d+)(?:\.\d+)?"
    r"(?:\s*/\s*\d+)?(?:\s*(?:%|percent\b))?|" + _NOT_EXPONENT + r"[-+]?\.\d+"
)
_BARE_LATEX_VALUE = re.compile(
    r"-?\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}|-?(?:(?<!\d)\d+\s*)?\\sqrt\s*\{[^{}]*\}|-?(?<!\d)\d+(?:\.\d+)?\^\{[^{}]*\}"
    r"|-?(?<!\d)\d+\^-?\d+"
)
_MD_NOISE = re.compile(r"\*\*|__|`|^[>\s]+|^#{1,3}\s+")
_EQUALS = re.compile(r"(?<![<>!\\:])=(?!=)")
_SIMPLE_LHS = re.compile(r"^\s*(?:[A-Za-z]'*(?:_\{?\w+\}?)?(?:\([^()]*\))?|\\[A-Za-z]+(?:_\{?\w+\}?)?)\s*$")
_VERB = re.compile(r"\s(?:is|are|equals|was|becomes)\s", re.IGNORECASE)
# Words that say another choice is *not* the answer: "C, not A or D", "C rather than A", "it can't be A", "B et
# non D", "C, nicht A", "D, no B", "B, а не D", "C，不是A". (Used by the comparison to drop those letters.)
NEGATION = (
    r"(?:\b(?:not|non|nicht|no|pas|nor|ni|cannot\s+be|can\s+not\s+be|rather\s+than|instead\s+of|other\s+than"
    r"|except|не)\b|n['’]t\s+be\b|不是|而非|并非|並非|ではなく|じゃなく)"
)
# A clause that states a value starts with one: a number, math, a letter choice, "x = ...", code ("sqrt(2)").
_STARTS_WITH_VALUE = re.compile(
    r"^(?:[-+]?\s?\.?\d|\$|\\[\[(A-Za-z]|[(\[{]|[A-Za-z](?:_\w+)?\s*=|(?:sqrt|cbrt|exp|ln|log|pi)\b"
    rf"|[A-J](?:[).:,]|\s*$|\s+(?:or|and)\s|\s*(?:(?:et|and|y|und|e|mais|but|а|и)\s+)?{NEGATION}"
    r"|\s+[A-Z][\w'’-]*\s*$))"
)
_QUALIFIER = re.compile(
    r"^(?:(?:either|maybe|perhaps|possibly|probably|approximately|about|around|roughly|exactly|just|only|for\s+sure"
    r"|definitely|clearly|certainly|surely|indeed|simply)\s+)+",
    re.IGNORECASE,
)
_NEGATED_VALUE = re.compile(rf"\s*[,;]?\s*(?:(?:and|et|und|y|e|mais|but|а|и)\s+)?{NEGATION}")
# After a value, a new clause ("17 and then we check it", "12 but let me double check", "5 so she has five"):
# its words are not the answer. A unit ("17 apples"), a hedge ("3 or 4") or more values ("x = 5 and y = 3") are.
_PROSE_TAIL = re.compile(
    r"(?:\s*[,;]\s*|\s+)(?:(?:and|but|so|then|thus|hence|therefore)\s+)*"
    r"(?:we|i|it|this|that|these|those|they|he|she|you|let|let's|there|here|then|so|but|thus|hence|therefore|now"
    r"|next|which|because|since|while|whereas|as|if|when|where|check|note|double|verify|depending)\b",
    re.IGNORECASE,
)
# Longest clause read after an anchor: a line, not a book.
_MAX_CLAUSE_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Extraction:
    """The final answer found in a response.

    Attributes:
        parts: the answer's pieces as written (one per box joined into the final answer; usually one).
        source: ``boxed``, ``answer_tag``, ``anchor``, ``fallback``, or ``None`` when there is no answer.
        detail: why there is no answer, when there is none.
        multipart: when the last boxes are the parts of one answer joined by their part labels ("\\boxed{3} for
            part (a) and \\boxed{5} for part (b)", "$y_1 = \\boxed{..}$ and $y_2 = \\boxed{..}$"), those boxes,
            each with the name assigned to it; empty otherwise. Used only against a reference with as many parts.
    """

    parts: tuple[str, ...] = ()
    source: str | None = None
    detail: str | None = None
    multipart: tuple[str, ...] = ()

    @property
    def text(self) -> str | None:
        return ", ".join(self.parts) if self.parts else None


_INVISIBLE = re.compile(r"\\(?:text|mathrm|mbox|textbf|mathbf)\s*\{\s*\}|\\[,;:! ]|\\q?quad(?![A-Za-z])|~|[{}\s]")


def _blank(content: str) -> bool:
    """Does a box show nothing? ``\\boxed{}``, ``\\boxed{\\text{}}``, ``\\boxed{\\quad}``, ``\\boxed{{}}``."""
    return not _INVISIBLE.sub("", content)


def _box_answer(text: str, boxes: list[tuple[int, int, str | None]], *, liberal: bool = False) -> Extraction:
    """The final answer given by the last box, with the boxes joined to it.

    ``liberal`` (used for references, which are trusted) also joins boxes separated by a short phrase
    ("\\boxed{1} papers and \\boxed{2} bins"); for responses only pure separators join, so a corrected
    earlier box ("\\boxed{5}, but ... \\boxed{8}") is not part of the final answer.
    """
    start, _end, content = boxes[-1]
    if content is None:
        return Extraction(detail="the last \\boxed{ is never closed")
    if _blank(content):
        return Extraction(detail="the last \\boxed{} is empty")
    parts = [content.strip()]
    for prev_start, prev_end, prev_content in reversed(boxes[:-1]):
        between = text[prev_end:start]
        joined = _BOX_SEPARATOR.match(between) or (
            liberal
            and len(between) < 70
            and re.search(r",|;|\b(?:and|or)\b", between)
            and not re.search(r"[.!?]\s|\n\s*\n", between)
        )
        if prev_content is None or _blank(prev_content) or not joined:
            break
        parts.append(prev_content.strip())
        start = prev_start
    multipart = () if liberal else _multipart(text, boxes)
    return Extraction(parts=tuple(reversed(parts)), source="boxed", multipart=multipart)


# Between the boxes of a multi-part answer only part labels and these words may stand ("for part (b) we
# get", "and", "respectively"): a correction or a hedge ("no wait", "but", "or maybe") has other words.
_PART_WORDS = frozenset(
    {
        *("for", "part", "parts", "and", "the", "first", "second", "third", "fourth", "fifth", "last"),
        *("question", "questions", "we", "get", "is", "are", "respectively", "then"),
        *("with", "in", "of", "to", "gives", "value", "values", "case", "cases", "item"),
    }
)
_PART_NOISE = re.compile(
    r"\\[()\[\]]|\$|\\q?quad|\\[,;: ]|(?<![A-Za-z])\(?(?:[a-h]|i{1,3}|iv|vi?)\)"
    r"|[A-Za-z](?:_\{?\w+\}?)?\s*=|[,;:.()\s]"
)
# What says that the next box is another part: "and", a comma, a part label, a name assigned, a new line.
_PART_SIGNAL = re.compile(r"\band\b|[,;=\n]|\bpart|\brespectively\b|(?<![A-Za-z])\(?(?:[a-h]|i{1,3}|iv|vi?)\)", re.I)
_LABEL_BEFORE = re.compile(r"(?:^|(?<=[\s$(]))([A-Za-z](?:_\{?\w+\}?)?)\s*=\s*(?:\$|\\[(\[])?\s*$")


def _part_join(between: str) -> bool:
    if len(between) > 80 or re.search(r"\n\s*\n", between):
        return False
    between = re.sub(r"\\text\s*\{([^{}]*)\}", r" \1 ", between)
    if not _PART_SIGNAL.search(between):
        return False  # "\\boxed{2}. Then it is \\boxed{3}": a restatement, not a second part
    words = _PART_NOISE.sub(" ", between).lower().split()
    return all(w in _PART_WORDS for w in words)


def _multipart(text: str, boxes: list[tuple[int, int, str | None]]) -> tuple[str, ...]:
    """The last boxes joined by part labels, each with its assigned name ("y_2 = ..."), or ``()``."""
    group = [boxes[-1]]
    for box in reversed(boxes[:-1]):
        if box[2] is None or _blank(box[2]) or not _part_join(text[box[1] : group[0][0]]):
            break
        group.insert(0, box)
    if len(group) < 2:
        return ()
    parts = []
    for i, (start, _end, content) in enumerate(group):
        before = text[max(0, start - 30) : start] if i == 0 else text[group[i - 1][1] : start]
        label = _LABEL_BEFORE.search(before)
        parts.append(f"{label.group(1)} = {str(content).strip()}" if label else str(content).strip())
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    content: str


def _math_spans(text: str) -> list[_Span]:
    """The ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` spans of ``text``, in one linear pass.

    An inline ``$`` does not cross a line; ``\\$`` is an escaped dollar; an opener never closed is no span.
    """
    spans: list[_Span] = []
    opener: re.Match[str] | None = None
    for m in _DELIMITER.finditer(text):
        tok = m.group()
        if tok == "\\$":
            continue
        if opener is not None:
            want = _CLOSER[opener.group()]
            if tok == want and not (want == "$" and "\n" in text[opener.end() : m.start()]):
                content = text[opener.end() : m.start()].strip()
                if content:
                    spans.append(_Span(opener.start(), m.end(), content))
                opener = None
                continue
            if opener.group() != "$" or "\n" not in text[opener.end() : m.start()]:
                continue  # inside a span: other delimiters are its content
        if tok in _CLOSER and not (tok == "$" and m.start() > 0 and (text[m.start() - 1].isalnum())):
            opener = m
    return spans


# What leaves a chain of working open: "= ", "+", "\\cdot" after the last value (also past a LaTeX line break
# and an align "&": "\\frac{5+10i}{5} \\\\ &= "). The value before it is an intermediate, not a result.
_UNFINISHED_GAP = re.compile(
    r"(?:\s|\\\\|&)*(?:[\^_]\{?[\w.]+\}?\s*)?(?:=|[-+*/×÷·]|\\cdot|\\times|\\div|\\pm|\\approx)"
)
# A "$" that opens a price ("$18 left", "$ 2.50 each"): digits, and nothing on the line that only math has.
_PRICE = re.compile(r"\s?\d")
_MATH_ONLY = re.compile(r"[=^_{\\]")


def _unclosed_math(text: str) -> int | None:
    """Where the text's last math span opens and is never closed (the completion stopped inside a formula:
    "$3^3=", "\\[ P(16) = "), or ``None``. Only an opener on the text's last line counts (a stray one higher up
    is a typo, not the point where the text stops), and not a ``$`` that opens a price ("$18 left")."""
    opener: re.Match[str] | None = None
    for m in _DELIMITER.finditer(text):
        tok = m.group()
        if tok == "\\$":
            continue
        if opener is not None:
            want = _CLOSER[opener.group()]
            if tok == want and not (want == "$" and "\n" in text[opener.end() : m.start()]):
                opener = None
                continue
            if opener.group() != "$" or "\n" not in text[opener.end() : m.start()]:
                continue
        if tok in _CLOSER and not (tok == "$" and m.start() > 0 and (text[m.start() - 1].isalnum())):
            opener = m
    if opener is None:
        return None
    rest = text[opener.end() :].rstrip()
    if "\n" in rest or (opener.group() == "$" and _PRICE.match(rest) and not _MATH_ONLY.search(rest)):
        return None  # a stray opener lines above the end ("= $$<<16+27=43>>43", GSM8K), or a price
    return opener.start()


def _outside(spans: list[_Span], pos: int, starts: list[int] | None = None) -> bool:
    """Is ``pos`` outside every span? (Spans are sorted and disjoint; pass ``starts`` when asking often.)"""
    i = bisect.bisect_right(starts if starts is not None else [s.start for s in spans], pos) - 1
    return i < 0 or pos >= spans[i].end


def _without_spans(text: str, spans: list[_Span]) -> str:
    out, last = [], 0
    for sp in spans:
        out.append(text[last : sp.start])
        out.append(" ")
        last = sp.end
    out.append(text[last:])
    return "".join(out)


# A word: two Latin letters, or any run of letters of another script ("答案", "Ответ"), which a value never has.
_WORD = re.compile(r"[A-Za-z]{2,}|[^\W\d_A-Za-z]+")


def _word_count(s: str) -> int:
    without_latex = re.sub(r"\\[A-Za-z]+", " ", _without_spans(s, _math_spans(s)))
    return len(_WORD.findall(without_latex))


def _has_math(s: str) -> bool:
    return bool(re.search(r"\d|\\[A-Za-z]|\$", s))


def _split_top_level_equals(expr: str) -> list[str]:
    """Split on ``=`` outside braces/brackets: ``F_n = \\sum_{k=0}^{n}`` splits once, not at ``k=0``."""
    sides, depth, last = [], 0, 0
    for i, c in enumerate(expr):
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == "=" and depth == 0:
            prev, nxt = expr[i - 1 : i], expr[i + 1 : i + 2]
            if prev not in ("<", ">", "!", "\\", ":", "=") and nxt != "=":
                sides.append(expr[last:i])
                last = i + 1
    sides.append(expr[last:])
    return sides


def _variables(s: str) -> bool:
    """Has ``s`` an unknown to solve for? Not when its letters are e, i or bound by a sum, product, integral or
    limit: "e^{i\\pi} = -1" and "\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}" state their right side."""
    if re.search(r"\\(?:sum|prod|int|oint|lim|binom|det)(?![A-Za-z])", s):
        return False
    return _letters(re.sub(r"(?<![A-Za-z\\])[ei](?![A-Za-z])", "", s))


def _letters(s: str) -> bool:
    """Does ``s`` have variables (letters outside LaTeX commands)?"""
    return bool(re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", s)))


def _result_side(expr: str) -> str:
    """The value of an equation chain: ``x = 3 + 4 = 7`` -> ``7``; ``a = \\frac{1}{3} \\approx 0.33`` -> the
    exact side; ``x \\approx 11`` -> ``11``. A real equation (``y = 2x + 3``, ``x^2/16 + y^2/12 = 1/4``)
    is kept whole."""
    inner = expr.strip()
    bracketed = inner[:1] in "([" and inner[-1:] in ")]" and closing_bracket(inner) == len(inner) - 1
    if bracketed and "," not in inner and len(_split_top_level_equals(inner[1:-1])) > 1:
        expr = inner[1:-1]  # "(35 + 70 = 105)", "[ 56 + 11 = 67 ]": an equation in brackets is not a tuple
    sides = _split_top_level_equals(expr)
    if len(sides) > 1 and "," not in expr:
        lhs, rhs = sides[0], sides[-1]
        if len(sides) > 2 or not _variables(lhs) or (_SIMPLE_LHS.match(lhs) and not _letters(rhs)):
            expr = rhs
    approx = re.split(r"\\approx|\\simeq|≈", expr)
    if len(approx) > 1:
        expr = approx[-1] if (not approx[0].strip() or _SIMPLE_LHS.match(approx[0])) else approx[0]
    return expr.strip()


def _clean_clause(text: str, *, value_only: bool, nearest: bool = False) -> str | None:
    """The value stated by an "answer is ..." clause, or ``None`` if it states none.

    The clause is the rest of the line (or the next non-empty line), up to the end of its first sentence.
    It counts when it starts with a value (a number, math, a choice letter, "x = ...", code), and then ends
    where a new clause starts ("The answer is 17 and then we check it" is 17); "The volume of $V$ is 120"
    gives what follows the last "is" outside math. Otherwise, with ``nearest`` (an answer phrase of another
    language), the first value after the phrase counts ("Réponse : il reste 35 pommes après 3 jours" is 35);
    else, unless ``value_only``, a short word answer ("Navin") counts too. Prose ("The answer is consistent
    with the 3 checks") states nothing.
    """
    text = text.lstrip(" :=\t")
    line = next((ln for ln in text.split("\n", 50) if ln.strip()), "")[:_MAX_CLAUSE_CHARS]
    line = _MD_NOISE.sub("", line).strip()
    line = re.split(r"</?[A-Za-z][\w-]*\s*>", line, maxsplit=1)[0]  # "42</answer>": a tag ends it
    spans = _math_spans(line)
    # The first sentence only: a period followed by a space or the end (not a decimal point), outside math.
    # A parenthetical remark ("25 (since 5*5=25)") ends it too, but not a hedge ("3 (or 4)").
    for m in re.finditer(
        r"\.(?:\s|$)|[!?;](?:\s|$)|[。！？；]|\s(?:because|since|which|as)\s"
        r"|\s\((?!\s*(?:or|and)\b)[A-Za-z]{2,}\b",
        line,
    ):
        if _outside(spans, m.start()):
            line = line[: m.start()]
            break
    line = _QUALIFIER.sub("", line.strip())
    starts = bool(_STARTS_WITH_VALUE.match(line))
    if starts:
        spans = _math_spans(line)
        for m in _PROSE_TAIL.finditer(line):
            if m.start() > 0 and _outside(spans, m.start()):
                line = line[: m.start()]
                break
        # "12, not 13", "12, pas 13": what the answer is not is no second value. (A choice letter keeps its
        # negations: the comparison reads them, "C, not A or D".)
        negated = _NEGATED_VALUE.search(line)
        if negated and negated.start() > 0 and _outside(spans, negated.start()) and re.match(r"[-+.\d$\\]", line):
            line = line[: negated.start()]
    verbs = [m for m in _VERB.finditer(line) if _outside(_math_spans(line), m.start())]
    if verbs:
        after = _QUALIFIER.sub("", line[verbs[-1].end() :].strip())
        # "$x$ is 5" states 5; "17 so the total is large" states 17, not "large".
        if not starts or _STARTS_WITH_VALUE.match(after):
            line = after
    line = line.strip().rstrip(".").strip()
    # "either 42 or 43" is the hedge "42 or 43"; "approximately 42" states 42.
    line = _QUALIFIER.sub("", line)
    if not line:
        return None
    if not _STARTS_WITH_VALUE.match(line):
        if (spelled := _spelled_clause(line)) is not None:
            return spelled
        if nearest:
            return _first_value(line)
        plain = line.strip("*_ ")
        # A word answer is a few words ("Navin", "the red one"), not a run of 500 letters.
        if value_only or _word_count(plain) > 3 or len(plain.split()) > 4 or re.search(r"\d", plain):
            return None
        return plain
    spans = _math_spans(line)
    if spans:
        values = [_result_side(sp.content) for sp in spans]
        # A plain number joined to the math by "or", "and" or a comma is part of the answer: "5 or $7$" is a
        # hedge, not 7; "$x = 5$ or 7" is not 5.
        if before := _HEDGED_BEFORE.match(line[: spans[0].start]):
            values.insert(0, before.group(1))
        if after_math := _HEDGED_AFTER.match(line[spans[-1].end :]):
            values.append(after_math.group(1))
        return ", ".join(values) or None
    return _assignments_side(line) or None


# What may follow a number in words in an answer clause: a unit ("forty two apples"), not prose ("one of them").
_NOT_A_UNIT = re.compile(
    r"\b(?:of|the|a|an|that|which|who|is|are|was|more|less|than|way|ways|time|times|thing|things|another|other)\b",
    re.IGNORECASE,
)


def _spelled_clause(line: str) -> str | None:
    """A clause that states a number in words ("forty two", "three hundred and five apples"), or ``None``."""
    try:
        read = read_number_words(line)
    except ValueError:
        return None
    if read is None:
        return None
    rest = read[1].strip(" .")
    if len(rest.split()) > 2 or _NOT_A_UNIT.search(rest) or re.search(r"\d", rest):
        return None
    return line.strip(" .")


# "y = 2 or y = -2", "x = 1, y = 3": where a list of assignments splits (before the next "name =").
_BEFORE_ASSIGNMENT = re.compile(r"\s*(?:,|;|\bor\b|\band\b)\s*(?=[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=))", re.IGNORECASE)


def _assignments_side(line: str) -> str:
    """:func:`_result_side` of each assignment of a list: "y = 2 or y = -2" is the two values "y = 2, y = -2"
    (a hedge for a single value), never the last side "-2"; "x = 3 + 4 = 7" is 7."""
    pieces = _BEFORE_ASSIGNMENT.split(line)
    if len(pieces) == 1:
        return _result_side(line)
    out = []
    for piece in pieces:
        sides = _split_top_level_equals(piece)
        out.append(f"{sides[0].strip()} = {sides[-1].strip()}" if len(sides) > 1 else piece.strip())
    return ", ".join(out)


_JOINED_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)"
_JOIN = r"\s*(?:,|;|\bor\b|\band\b)\s*(?:(?:or|and|maybe|perhaps|possibly)\s+)*(?:[A-Za-z](?:_\w+)?\s*=\s*)?"
_HEDGED_BEFORE = re.compile(rf"^\s*{_JOINED_NUMBER}{_JOIN}$", re.IGNORECASE)
_HEDGED_AFTER = re.compile(rf"^{_JOIN}{_JOINED_NUMBER}\s*\.?\s*$", re.IGNORECASE)


# What joins the fallback's last value to earlier ones into one answer: "3 or 4", "$x=2$ and $x=5$",
# "y = 2 or y = -2" (two assignments of one variable: a hedge, not the last value).
_VALUE_SEPARATOR = re.compile(
    r"^\s*(?:,|;|\bor\b|\band\b|,\s*(?:or|and)\b)\s*(?:[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=)\s*)?$", re.IGNORECASE
)
# What joins two values into one expression: "3 + √7", "4 - \sqrt{3}", "2 \cdot 5".
_OPERATOR_GAP = re.compile(r"^\s*(?:[-+*/×÷]|\\cdot|\\times|\\div|\\pm)\s*$")
_APPROX_GAP = re.compile(r"^\s*(?:\\approx|\\simeq|≈|~)\s*$")
# A numbered list item ("1. **Compute** ...", "2. **结论**：...") is not a value: its number, when bold follows
# it, or when it starts a line of a list that counts up from 1.
_BOLD_ITEM = re.compile(r"(?:^|(?<=\s))\d{1,2}\.(?=[ \t]*(?:\*\*|__))", re.MULTILINE)
_LINE_ITEM = re.compile(r"^[ \t>]*(\d{1,2})\.[ \t]+(?=[^\d\s])", re.MULTILINE)
_STATING_WORD = re.compile(r"(?:=|\b(?:is|are|equals|be|was)|是|为|為)\s*$", re.IGNORECASE)


def _list_markers(text: str) -> set[int]:
    """Start positions of the numbers that mark list items."""
    markers = {
        m.start()
        for m in _BOLD_ITEM.finditer(text)
        if not _STATING_WORD.search(text[max(0, m.start() - 12) : m.start()])
    }
    seen: set[int] = set()
    for m in _LINE_ITEM.finditer(text):
        n = int(m.group(1))
        if n == 1 or n - 1 in seen:
            markers.add(m.start(1))
        seen.add(n)
    return markers


def _candidates(text: str, spans: list[_Span], start: int = 0) -> list[tuple[int, int, str]]:
    """The values of the text from ``start`` on, (start, end, text) sorted by position: its math spans (whole,
    also one that opens before ``start``), and its numbers and bare LaTeX values outside them (not list
    markers); one inside a longer one is part of it ("2^{10}")."""
    starts = [sp.start for sp in spans]
    first = bisect.bisect_right([sp.end for sp in spans], start)
    found: list[tuple[int, int, str]] = [(sp.start, sp.end, sp.content) for sp in spans[first:]]
    markers = _list_markers(text) if "." in text else set()
    for pattern in (_NUMBER, _BARE_LATEX_VALUE):
        for m in pattern.finditer(text, start):
            if _outside(spans, m.start(), starts) and m.start() not in markers:
                found.append((m.start(), m.end(), m.group(0)))
    found.sort(key=lambda c: (c[0], -c[1]))
    out: list[tuple[int, int, str]] = []
    for cand in found:
        if out and cand[0] < out[-1][1]:
            if cand[1] > out[-1][1] and cand[0] == out[-1][0]:
                out[-1] = cand
            continue
        out.append(cand)
    return out


def _runs(text: str, cands: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Values joined by arithmetic operators, as one expression each: "3 + √7" is one value, not two."""
    runs: list[tuple[int, int, str]] = []
    for start, end, content in cands:
        if runs and _OPERATOR_GAP.match(text[runs[-1][1] : start]):
            prev = runs[-1]
            runs[-1] = (prev[0], end, f"{prev[2]} {text[prev[1] : start].strip()} {content}")
        else:
            runs.append((start, end, content))
    return runs


def _first_value(line: str) -> str | None:
    """The first value of a clause, with the values chained to it ("3 + 4 = 7" is 7), or ``None``."""
    cands = _candidates(line, _math_spans(line))
    if not cands:
        return None
    runs = _runs(line, cands)
    chain = [runs[0]]
    for run in runs[1:]:
        if not re.fullmatch(r"\s*=\s*", line[chain[-1][1] : run[0]]):
            break
        chain.append(run)
    if _unfinished_after(line, chain[-1]):
        return None  # "2002 - 56 - 6 = ...": the working stops before its result
    return _result_side(" = ".join(r[2] for r in chain)) or None


def _unfinished_after(text: str, run: tuple[int, int, str]) -> bool:
    """Does the chain of working end open at ``run``: an ``=`` or an operator follows it, or its math span
    ends in one ("$3^7/3^3=3^4=$")?"""
    return bool(_UNFINISHED_GAP.match(text, run[1])) or bool(re.search(r"(?:=|[-+*/×÷·]|\\cdot|\\times)\s*$", run[2]))


# The fallback takes its values from the end of a text only: the value it takes is the last one, and a long
# reasoning without a final answer (a truncated rollout) cost tens of milliseconds to scan whole (issue 14).
_FALLBACK_CHARS = 4096


def _fallback(text: str, *, whole_if_short: bool = True) -> str | None:
    """The last value of the text (a number, LaTeX value or math span, with the values an arithmetic operator
    joins to it: "3 + √7"; the exact side of "1 + √2 ≈ 2.414"), with the values joined to it by
    ``,``/``or``/``and`` ("3 or 4" is a hedge, "$x=2$ and $x=5$" two roots); a short text with no words
    (``\\frac{10}{9}``) is the answer as a whole. Values are looked for in the last ``_FALLBACK_CHARS``
    characters (math spans and list markers are still found over the whole text), so a long text without an
    answer costs little more than a short one."""
    stripped = _MD_NOISE.sub("", text).strip()
    if whole_if_short and len(stripped) <= 60 and "\n" not in stripped and _word_count(stripped) == 0:
        stripped = _strip_math_delimiters(stripped.rstrip(".").strip())
        if stripped and _has_math(stripped) and not _math_spans(stripped):
            return _result_side(stripped)
    # From a word boundary, so that the first number of the window is whole.
    tail = max(0, len(text) - _FALLBACK_CHARS)
    tail = max(text.rfind(" ", 0, tail), text.rfind("\n", 0, tail)) + 1 if tail else 0
    if _unclosed_math(text) is not None:
        return None  # it stopped inside a formula: whatever value precedes it is working, not a result
    runs = _runs(text, _candidates(text, _math_spans(text), tail))
    if not runs or _unfinished_after(text, runs[-1]):
        return None
    i = len(runs) - 1
    if i > 0 and _APPROX_GAP.match(text[runs[i - 1][1] : runs[i][0]]):
        i -= 1  # "1 + √2 ≈ 2.414": the exact value, not its rounding
    last = runs[i][2]
    if i == len(runs) - 1 and text[runs[i][0]] == "$" and "\\" not in last and _word_count(last) >= 2:
        # "$? just about 1$": prose between two dollar signs (a price, a stray "$"), not math: its last value.
        inner = _fallback(last, whole_if_short=False)
        if inner:
            return inner
    values = [_result_side(runs[i][2])]
    while i > 0 and _VALUE_SEPARATOR.match(text[runs[i - 1][1] : runs[i][0]]):
        i -= 1
        values.append(_result_side(runs[i][2]))
    return ", ".join(v for v in reversed(values) if v) or None


def _final_text(response: str) -> tuple[str, str | None]:
    """The part of the response that may hold the final answer, or a reason there is none."""
    closes = list(_THINK_CLOSE.finditer(response))
    if closes:
        return response[closes[-1].end() :], None
    if _THINK_OPEN.search(response):
        return "", "the reasoning (<think>) never ends, so there is no final answer"
    return response, None


def _last_answer_tag(text: str) -> tuple[int, int, Extraction] | None:
    """The last ``<answer>...</answer>``: (start, end, extraction). Its content is the answer as a whole
    when it is one ("\\begin{pmatrix}...", "\\frac{270}7 degrees"); an "answer is" sentence inside it
    gives its value; a longer text gives its last value."""
    opens = list(_ANSWER_OPEN.finditer(text))
    if not opens:
        return None
    last_open = opens[-1]
    close = _ANSWER_CLOSE.search(text, last_open.end())
    if close is None:
        return last_open.start(), len(text), Extraction(detail="the last <answer> tag is never closed")
    inner = text[last_open.end() : close.start()].strip()
    if not inner:
        return last_open.start(), close.end(), Extraction(detail="the last <answer></answer> is empty")
    value = _last_anchor_value(inner, value_only=False)
    if value is None:
        bare = _strip_math_delimiters(_MD_NOISE.sub("", inner).strip().rstrip(".").strip())
        value = bare if "\n" not in bare and _word_count(bare) < 3 else _fallback(inner)
    return last_open.start(), close.end(), Extraction(parts=(value or inner,), source="answer_tag")


_CHECKING = re.compile(
    r"\b(?:check|checking|verify|verifying|confirm|test|testing)\s+(?:our|the|my|this|that|your)?\s*$", re.I
)


def _last_anchor_value(text: str, *, value_only: bool) -> str | None:
    for m in reversed(_anchors(text)):
        if _CHECKING.search(text, max(0, m.start() - 24), m.start()):
            continue  # "We may check our answer: $17 \cdot 44 = 748$": a check, not the answer
        # A non-English anchor word also occurs in prose ("我们检查答案。"): only a value counts after it, the
        # one nearest the phrase.
        foreign = m.groupdict().get("foreign") is not None
        clause = _clean_clause(
            text[m.end() : m.end() + _MAX_CLAUSE_CHARS + 200], value_only=value_only or foreign, nearest=foreign
        )
        if clause:
            return clause
    return None


# A response that is only a choice letter: "C", "(A)", "**B**", ": D", "E)".
_LETTER_ONLY = re.compile(r"^[\s:>*_\-]*(?:\\text(?:bf)?\{)?\(?([A-J])\)?\}?[.:)。]?[\s*_]*$")
# For a multiple-choice reference: a response that starts with its letter ("D. it can't be A or B", "B。不是 A"),
# or a letter right after a word that chooses it ("therefore I think it's B").
_LETTER_FIRST = re.compile(
    rf"^[\s:>*_\-]*\(?([A-J])\)?(?:[.:)。,]|\s*(?={NEGATION})|\s+(?=(?:is|because|since|as)\b)|\s*$)"
)
_LETTER_CHOSEN = re.compile(
    r"\b(?:it['’]s|it\s+is|is|be|choose|chose|pick|select|option|choice|answer|therefore|thus|so|hence)\s*[:\-]?\s*"
    r"\(?([A-J])\)?(?![\w'’])",
)


_PRONOUN_I = re.compile(r"\s+[a-z]|['’]")


def _letter_answer(text: str, choice: bool) -> str | None:
    """A choice letter given without an answer phrase (see :data:`_LETTER_ONLY`), or ``None``."""
    plain = _MD_NOISE.sub("", text).strip()
    m = _LETTER_ONLY.match(plain)
    if m:
        return m.group(1)
    if not choice:
        return None
    m = _LETTER_FIRST.match(plain)
    if m:
        return m.group(1)
    # "so I think": the pronoun, not choice I.
    chosen = [m for m in _LETTER_CHOSEN.finditer(plain) if not (m.group(1) == "I" and _PRONOUN_I.match(plain, m.end()))]
    return chosen[-1].group(1) if chosen else None


def extract_final_answer(
    response: str, *, fallback: bool = True, choice: bool = False, explicit_only: bool = False
) -> Extraction:
    """Find the final answer of a response, by the rules in the module docstring.

    The last explicit final answer wins: the last box or ``<answer>`` tag, whichever comes later, unless an
    "answer is" line that *starts with a value* follows both ("\\boxed{255} ... Final answer: $10,455$").

    Args:
        response: the completion text.
        fallback: allow the last-number/last-span fallback when there is no explicit final answer.
        choice: the reference is a multiple-choice letter, so a response that starts with a letter, or names
            one right after "it's"/"choose"/"therefore", answers with it (before any number fallback).
        explicit_only: only a box, an ``<answer>`` tag or an "answer is" line counts (no letter, no fallback):
            for a completion cut at the length limit, which has not answered (issue 23).

    Returns:
        An :class:`Extraction`; ``parts`` is empty when there is no final answer.
    """
    text, why = _final_text(response)
    if why:
        return Extraction(detail=why)
    # Before anything reads the text: "The answer is −5" (U+2212) states -5, and the fallback's number
    # pattern only knows the ASCII minus, so an unnormalised sign would be silently dropped.
    text = strip_special_tokens(normalize_unicode(text))

    boxes = _find_boxes(text)
    candidates: list[tuple[int, Extraction]] = []
    after = 0
    if boxes:
        candidates.append((boxes[-1][0], _box_answer(text, boxes)))
        after = boxes[-1][1]  # an unterminated box runs to the end of the text
    tag = _last_answer_tag(text[after:])
    if tag is not None:
        candidates.append((after + tag[0], tag[2]))
        after += tag[1]
    # Past a formula that is never closed the text is broken: an "answer is" line there states nothing.
    unclosed = _unclosed_math(text)
    end = len(text) if unclosed is None else unclosed
    anchored = _last_anchor_value(text[after:end], value_only=bool(candidates)) if end > after else None
    if anchored:
        candidates.append((len(text), Extraction(parts=(anchored,), source="anchor")))
    if candidates:
        return max(candidates, key=lambda c: c[0])[1]
    if explicit_only:
        return Extraction(detail="truncated: no \\boxed{}, <answer> tag or 'answer is' line before the cut")
    statements = list(_CHOICE_STATEMENT.finditer(text))
    if statements:
        letter = next(g for g in statements[-1].groups() if g)
        return Extraction(parts=(letter.upper(),), source="anchor")
    letter = _letter_answer(text, choice)
    if letter:
        return Extraction(parts=(letter,), source="letter")
    if fallback:
        found = _fallback(text)
        if found:
            return Extraction(parts=(found,), source="fallback")
    return Extraction(detail="no \\boxed{}, <answer> tag, 'answer is' line or number found")
