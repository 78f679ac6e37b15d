r"""Word and phrase references compared as text (issue 23).

A reference that is a short phrase ("All prime numbers", "the second player", "Monday") is compared with
the answer as normalised words: case, ``\text{}``, punctuation and the articles *a*, *an*, *the* do not count,
nor an English plural ending; a leading *all* and a *numbers* after another word are dropped ("All prime
numbers" is "primes"). Every other word counts, negations included: "no prime numbers" is not "primes".
A phrase has at most four words and no pronoun or verb of a sentence about the answer ("The figure shows
it." stays invalid).

A reference that is a sentence is compared on its key span only where one pattern names it unambiguously:
"<who> wins." (also *win*, *will win*, *can win*, *can always win*, *has a winning strategy*), "The answer is
<span>.", "It is <span>.", and a sentence that opens with *Yes* or *No*. The answer may be the span or the
same sentence. A span with a negation ("The first player does not win") is no key span. Any other text of
more than four words ("The midpoints form a regular hexagon") stays ``invalid_ground_truth``.
"""

from __future__ import annotations

import re

from reward_server.verifiers.math.text import _strip_math_delimiters, _unwrap_text_commands, normalize_unicode

_ARTICLES = frozenset({"a", "an", "the"})
_NEGATIONS = frozenset({"not", "no", "never", "cannot", "can't", "doesn't", "don't", "won't", "neither", "nor"})
_MAX_PHRASE_WORDS = 4
# Pronouns, verbs and pointers of a sentence about the answer ("The figure shows it."): such a
# reference names no answer, and stays invalid_ground_truth.
_NOT_A_PHRASE = frozenset(
    [
        "it",
        "this",
        "that",
        "these",
        "those",
        "they",
        "we",
        "you",
        "he",
        "she",
        "i",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "see",
        "shows",
        "show",
        "shown",
        "given",
        "above",
        "below",
        "figure",
        "solution",
        "proof",
    ]
)
_WINS = re.compile(
    r"^(.+?)\s+(?:wins|win|will\s+win|can\s+win|can\s+always\s+win|always\s+wins|has\s+a\s+winning\s+strategy)$"
)
_STATED = re.compile(r"^(?:the\s+answer\s+is|it\s+is|it's)\s+(.+)$")
_YES_NO = re.compile(r"^(yes|no)\b\s*[,.;:!]")


def _plain(s: str) -> str | None:
    """The words of ``s`` in lower case, or ``None`` when it holds math or digits (no text answer)."""
    s = _unwrap_text_commands(normalize_unicode(_strip_math_delimiters(s.strip()))).replace("$", "").strip()
    s = s.replace("’", "'")
    if not s or re.search(r"[\d\\=^_<>{}()\[\]+*/|]", s):
        return None
    return re.sub(r"\s+", " ", s).strip().lower()


def _singular(word: str) -> str:
    if len(word) <= 3 or word.endswith("ss"):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if re.search(r"(?:s|x|z|ch|sh)es$", word):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def _key(plain: str) -> tuple[str, ...]:
    words = [w for w in re.findall(r"[a-z][a-z'\-]*", plain) if w not in _ARTICLES]
    if words[:1] == ["all"] and len(words) > 1:
        words = words[1:]
    if len(words) > 1 and words[-1] in ("number", "numbers"):
        words = words[:-1]
    return tuple(_singular(w) for w in words)


def _span(plain: str) -> str | None:
    """The key span of a sentence, when one pattern names it and it holds no negation."""
    plain = plain.rstrip(".!").strip()
    if m := _YES_NO.match(plain + "."):
        return m.group(1)
    for pattern in (_WINS, _STATED):
        if (m := pattern.match(plain)) is not None:
            span = m.group(1)
            words = set(re.findall(r"[a-z']+", span))
            if words & (_NEGATIONS | _NOT_A_PHRASE) or len(_key(span)) > _MAX_PHRASE_WORDS:
                return None
            return span
    return None


def text_reference(answer_text: str) -> str | None:
    """The phrase a word or sentence reference is compared on, or ``None`` when it is no text answer (math,
    digits) or a sentence without an unambiguous key span."""
    plain = _plain(answer_text)
    if plain is None:
        return None
    span = _span(plain)
    if span is not None:
        return span
    phrase = plain.rstrip(".!").strip()
    words = phrase.split()
    if not _key(phrase) or len(words) > _MAX_PHRASE_WORDS or set(words) & _NOT_A_PHRASE:
        return None
    return phrase


def same_phrase(answer: str, reference: str) -> bool:
    """Does the answer say the reference phrase (itself, or as the key span of a sentence)?"""
    plain = _plain(answer)
    if plain is None:
        return False
    want = _key(reference)
    if not want:
        return False
    span = _span(plain)
    if span in ("yes", "no") and set(re.findall(r"[a-z']+", plain)[1:]) & ({"yes", "no"} | _NEGATIONS):
        span = None  # "Yes, no, ..." or "Yes. No, wait": a hedge or a correction, not a yes
    return _key(plain) == want or (span is not None and _key(span) == want)
