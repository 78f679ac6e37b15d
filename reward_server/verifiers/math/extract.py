"""Finding the final answer of a completion: the last box, an <answer> tag, an "answer is" line, or the
fallback (the last number or math span)."""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from reward_server.schemas.format import DEFAULT_END_OF_TURN_TOKENS, DEFAULT_START_OF_TURN_TOKENS
from reward_server.verifiers.math.clauses import (
    _MAX_CLAUSE_CHARS,
    _MD_NOISE,
    NEGATION,
    _clean_clause,
    _fallback,
    _unclosed_math,
    _word_count,
)
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
