"""Language consistency, as DeepSeek-R1 defines it: the share of the chain of thought's words in the target.

DeepSeek-R1 (arXiv 2501.12948, section 2.3.3) adds a reward "calculated as the proportion of target
language words in the CoT". What that needs, and what is chosen here:

*Which text counts.* The chain of thought: the ``<think>`` part, or the whole completion when it has no
think tag (:func:`reward_server.verifiers.markup.chain_of_thought`). Inside it, these count for no
language, neither for nor against: fenced and inline code, code lines without fences (a line that starts
with a code keyword and ends in ``:``/``{``/``;`` or has ``(``/``=``, a line dense in code symbols, and the
indented lines under such a line), LaTeX and math (``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]``,
``\\begin{…}…\\end{…}``), URLs and e-mail addresses, and any token with a digit or a character other than
a letter, apostrophe or hyphen (numbers, file paths, ``snake_case``, ``a.b``, ``f(x)``, ``\\frac``), plus
``camelCase`` words, all-capital acronyms and one-letter words (as often a variable as a word).

*What a word is.* In scripts written with spaces (Latin, Cyrillic, Greek, Arabic, Hebrew, Hangul,
Devanagari, ...) a word is a run of letters, with inner apostrophes and hyphens. Chinese and Japanese are
written without spaces, so each Han, Hiragana or Katakana character is one word: Unicode's default word
boundaries (UAX #29) cut ideographs the same way, it needs no dictionary, it cannot be gamed by spacing,
and it is how word processors count CJK text. A dictionary segmenter would give about 1.5 characters per
word, so a Chinese stretch weighs about 1.5 times what it would with such a segmenter. Thai runs (no
spaces, and no script-level word unit) count one word per run.

*Which language a word is in.* The script decides where only one supported language uses it: Hangul is
``ko``, Greek ``el``, Hebrew ``he``, Devanagari ``hi``, Thai ``th``; kana is ``ja``; Han is ``ja`` in a
sentence with kana (or in a text where kana are at least a fifth of the CJK characters), else ``zh``.
Latin-, Cyrillic- and Arabic-script words go to a statistical detector (lingua, restricted to 17 languages,
:data:`DETECTED_LANGUAGES`) that gives each word's probability per language; a Viterbi pass then labels the
words with a cost of :data:`SWITCH_PENALTY` nats per change of language, so a run of words switches only
when the words' own evidence outweighs it (one strongly foreign word like "très" can, an ambiguous "on"
cannot). That is how a switch in the middle of a sentence is caught without labelling every short word on
its own. Letters of any other script count as ``other``.

*Short text.* Under ``min_words`` words that carry a language the check abstains (``None``,
``too_short``): detectors are unreliable on a few words, and a ratio of 2 words is noise.

*Determinism.* No randomness anywhere: the detector is a fixed model, ties break by a fixed language order.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import regex

from reward_server.schemas.language import SUPPORTED_LANGUAGES, LanguageParams
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.markup import chain_of_thought, code_spans

__all__ = [
    "DETECTED_LANGUAGES",
    "SWITCH_PENALTY",
    "LanguageBreakdown",
    "LinguaDetector",
    "WordDetector",
    "analyze",
    "default_detector",
    "score_language",
]

# The languages the statistical detector chooses between. Restricting lingua to them keeps its memory at
# about 350 MB (all 75 languages: over 1 GB) and avoids confusions with languages a reasoning model does
# not write (an English "Okay" labelled Yoruba). Script-determined languages need no model.
DETECTED_LANGUAGES: tuple[str, ...] = (
    "en", "fr", "de", "es", "pt", "it", "nl", "pl", "tr", "vi", "id", "cs", "sv", "ru", "uk", "ar", "fa",
)  # fmt: skip
# Cost, in nats of the words' log-probabilities, of switching language between two consecutive words.
SWITCH_PENALTY = 2.0
# Floor on a word's probability: one word alone can move the path by at most log(1/floor) = 6.9 nats.
_PROBABILITY_FLOOR = 1e-3
# A text is Japanese rather than Chinese when kana are at least this share of its CJK characters.
_KANA_SHARE_FOR_JAPANESE = 0.2

assert set(DETECTED_LANGUAGES) <= set(SUPPORTED_LANGUAGES)


class WordDetector(Protocol):
    """Gives each word a probability per language; the pipeline around it is detector-agnostic."""

    languages: tuple[str, ...]

    def probabilities(self, words: Sequence[str]) -> list[tuple[float, ...]]:
        """One tuple per word, aligned with ``languages``, each summing to 1 (or all 0 when unknown)."""
        ...


class LinguaDetector:
    """lingua-language-detector (high-accuracy mode) restricted to :data:`DETECTED_LANGUAGES`.

    The models load on first use or :meth:`load` (a few seconds and about 350 MB; ``low_accuracy``: well
    under a second and 25 MB; see ``benchmarks/language_detectors.py``), never at construction. Word probabilities are
    cached (lowercased word -> tuple), bounded by ``cache_size`` entries; lingua is deterministic, so the
    cache changes speed only.
    """

    def __init__(
        self, languages: Sequence[str] = DETECTED_LANGUAGES, cache_size: int = 100_000, low_accuracy: bool = False
    ) -> None:
        self.languages = tuple(languages)
        self._low_accuracy = low_accuracy
        self._cache_size = cache_size
        self._cache: dict[str, tuple[float, ...]] = {}
        self._detector: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the models now (a server can call this at start-up, in a thread, to spare the first request)."""
        self._lingua()

    def clear_cache(self) -> None:
        """Forget the cached word probabilities (for benchmarks that time cold words)."""
        self._cache.clear()

    def _lingua(self) -> Any:
        with self._lock:
            if self._detector is None:
                from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

                langs = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in self.languages]
                # Preloaded: lingua otherwise loads n-gram tables piecemeal during the first few thousand
                # words, which spreads seconds of loading over the first requests.
                builder = LanguageDetectorBuilder.from_languages(*langs).with_preloaded_language_models()
                # Low-accuracy mode (trigrams only) is 10x lighter but knows no word under 3 letters.
                self._detector = (builder.with_low_accuracy_mode() if self._low_accuracy else builder).build()
            return self._detector

    def probabilities(self, words: Sequence[str]) -> list[tuple[float, ...]]:
        keys = [w.lower() for w in words]
        # Read into a local dict first: another request's thread may clear the shared cache meanwhile.
        found = {k: self._cache.get(k) for k in set(keys)}
        missing = sorted(k for k, v in found.items() if v is None)
        if missing:
            index = {code: i for i, code in enumerate(self.languages)}
            results = self._lingua().compute_language_confidence_values_in_parallel(missing)
            if len(self._cache) + len(missing) > self._cache_size:
                self._cache.clear()
            for key, values in zip(missing, results, strict=True):
                probs = [0.0] * len(self.languages)
                for value in values:
                    probs[index[value.language.iso_code_639_1.name.lower()]] = value.value
                found[key] = self._cache[key] = tuple(probs)
        return [found[k] for k in keys]  # type: ignore[misc]


_default: LinguaDetector | None = None
_default_lock = threading.Lock()


def default_detector() -> LinguaDetector:
    """The process-wide lingua detector, created on first call (never at import)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LinguaDetector()
        return _default


# ---------------------------------------------------------------------------------------------------------
# Masking: text that counts for no language is blanked (same length, so offsets and lines survive).

_MATH = [
    re.compile(r"\$\$.+?\$\$", re.DOTALL),
    re.compile(r"\\\[.+?\\\]", re.DOTALL),
    re.compile(r"\\\(.+?\\\)", re.DOTALL),
    re.compile(r"\\begin\{([^}\n]*)\}.*?\\end\{\1\}", re.DOTALL),
    re.compile(r"\$(?=\S)[^$\n]*?\S\$|\$\S\$"),
]
_URLS = re.compile(r"\b(?:[a-z][a-z0-9+.-]*://|www\.)\S+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)
_CODE_KEYWORD = re.compile(
    r"^\s*(?:def|class|return|import|from|elif|else|try|except|finally|raise|lambda|print|function|const|let|"
    r"var|fn|func|pub|public|private|protected|static|void|int|long|double|float|bool|char|auto|struct|enum|"
    r"package|using|namespace|template|for|while|if|switch|case|#include|#define|@\w+)\b"
)
_CODE_SYMBOLS = frozenset("=(){}[];<>+*/%&|^~!")


def _is_code_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    if _CODE_KEYWORD.match(line) and (stripped[-1] in ":{;" or "(" in stripped or "=" in stripped):
        return True
    chars = [c for c in stripped if not c.isspace()]
    symbols = sum(c in _CODE_SYMBOLS for c in chars)
    return symbols / len(chars) >= 0.15 and any(c in "=(){}[];" for c in chars)


def _code_line_spans(text: str) -> list[tuple[int, int]]:
    """Code written without fences: code-looking lines and the indented lines under them."""
    spans = []
    offset = 0
    previous_code = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if body.strip():
            indented = body[:1] in ("\t",) or body.startswith("  ")
            code = _is_code_line(body) or (previous_code and indented)
            if code:
                spans.append((offset, offset + len(body)))
            previous_code = code
        offset += len(line)
    return spans


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def _mask(text: str) -> str:
    text = _blank(text, code_spans(text))
    for pattern in [*_MATH, _URLS]:
        text = _blank(text, [m.span() for m in pattern.finditer(text)])
    return _blank(text, _code_line_spans(text))


# ---------------------------------------------------------------------------------------------------------
# Words.

# Separators inside a whitespace token: sentence punctuation, and every CJK / full-width punctuation mark
# (Chinese and Japanese write "，" and "。" with no space around them).
_SEPARATORS = regex.compile(r"[,;!?\"“”«»„‚‹›…—–\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]+")
_EDGE_PUNCT = regex.compile(r"^[\p{P}\p{S}]+|[\p{P}\p{S}]+$")
_WORD_CHARS = regex.compile(r"^[\p{L}\p{M}'’\-‐]+$")
_CAMEL = regex.compile(r"\p{Ll}\p{Lu}")
_RUNS = regex.compile(
    r"(?P<han>\p{Han})"
    r"|(?P<kana>[\p{Hiragana}\p{Katakana}ー])"
    r"|(?P<ko>[\p{Hangul}][\p{Hangul}\p{M}]*)"
    r"|(?P<el>\p{Greek}[\p{Greek}\p{M}]*)"
    r"|(?P<he>\p{Hebrew}[\p{Hebrew}\p{M}]*)"
    r"|(?P<hi>\p{Devanagari}[\p{Devanagari}\p{M}]*)"
    r"|(?P<th>\p{Thai}[\p{Thai}\p{M}]*)"
    r"|(?P<detect>(?:\p{Latin}|\p{Cyrillic}|\p{Arabic})(?:[\p{Latin}\p{Cyrillic}\p{Arabic}\p{M}]|['’\-‐](?=\p{L}))*)"
    r"|(?P<other>\p{L}[\p{L}\p{M}]*)"
)
_SENTENCE_END = regex.compile(r"[.!?。！？\n]")
_KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")


@dataclass(slots=True)
class _Word:
    text: str
    kind: str  # "detect", "han", or a language code ("ja", "ko", ..., "other")
    sentence: int


def _words(masked: str) -> tuple[list[_Word], int]:
    """The words that carry a language, in order, and the count of tokens that carry none."""
    words: list[_Word] = []
    ignored = 0
    sentence = 0
    for chunk in regex.split(r"(\s+)", masked):
        if not chunk or chunk.isspace():
            sentence += chunk.count("\n")
            continue
        for piece in _SEPARATORS.split(chunk):
            core = _EDGE_PUNCT.sub("", piece)
            if not core:
                continue
            if (
                not _WORD_CHARS.match(core)
                or _CAMEL.search(core)
                or (len(core) > 1 and core.isupper() and not regex.search(r"[\p{Han}\p{Hiragana}\p{Katakana}]", core))
            ):
                ignored += 1
                continue
            for run in _RUNS.finditer(core):
                kind = run.lastgroup or "other"
                text = run.group(0).strip("'’-‐")
                if kind not in ("han", "kana") and len(text) < 2:
                    ignored += 1  # one-letter words: as often a variable (x, n, к) as a word
                    continue
                words.append(_Word(text, "ja" if kind == "kana" else kind, sentence))
            # A sentence ends at ".", "。" and the like; Han characters take their sentence's kana into account.
            sentence += len(_SENTENCE_END.findall(piece))
    return words, ignored


def _viterbi(log_probs: list[list[float]], penalty: float) -> list[int]:
    """The most probable label sequence when each change of label costs ``penalty``. Ties: lowest index."""
    n_labels = len(log_probs[0])
    labels = range(n_labels)
    score = list(log_probs[0])
    back: list[list[int]] = []
    for emission in log_probs[1:]:
        best = max(labels, key=score.__getitem__)
        switched = score[best] - penalty
        pointers = [j if score[j] >= switched else best for j in labels]
        score = [max(score[j], switched) + emission[j] for j in labels]
        back.append(pointers)
    label = max(labels, key=score.__getitem__)
    path = [label]
    for pointers in reversed(back):
        label = pointers[label]
        path.append(label)
    path.reverse()
    return path


@dataclass(frozen=True, slots=True)
class LanguageBreakdown:
    """Words of a text counted per language.

    Attributes:
        counts: words per ISO 639-1 code (``other`` for scripts with no supported language).
        ignored: tokens that count for no language (code, math, numbers, identifiers, one-letter words).
        labelled: each word and its language, in order (for debugging).
    """

    counts: dict[str, int]
    ignored: int
    labelled: list[tuple[str, str]] = field(repr=False)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def shares(self) -> dict[str, float]:
        total = self.total
        return {lang: n / total for lang, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))}

    def dominant(self) -> str | None:
        """The language with the most words (ties: alphabetical), or ``None`` for no words."""
        return min(self.counts, key=lambda lang: (-self.counts[lang], lang)) if self.counts else None


def analyze(text: str, detector: WordDetector | None = None) -> LanguageBreakdown:
    """Label every word of ``text`` that carries a language (see the module docstring for the rules).

    Args:
        text: the text to read; all of it counts (extract the chain of thought first).
        detector: word probabilities for Latin/Cyrillic/Arabic words; :func:`default_detector` when ``None``.
    """
    words, ignored = _words(_mask(text))
    labels: list[str] = [w.kind for w in words]

    detect = [i for i, w in enumerate(words) if w.kind == "detect"]
    if detect:
        detector = detector or default_detector()
        probs = detector.probabilities([words[i].text for i in detect])
        log_probs = [[math.log(p + _PROBABILITY_FLOOR) for p in row] for row in probs]
        for i, label in zip(detect, _viterbi(log_probs, SWITCH_PENALTY), strict=True):
            labels[i] = detector.languages[label]

    han = [i for i, w in enumerate(words) if w.kind == "han"]
    if han:
        kana_sentences = {w.sentence for w in words if w.kind == "ja"}
        n_kana = sum(w.kind == "ja" for w in words)
        japanese_text = n_kana >= _KANA_SHARE_FOR_JAPANESE * (n_kana + len(han))
        for i in han:
            labels[i] = "ja" if japanese_text or words[i].sentence in kana_sentences else "zh"

    return LanguageBreakdown(
        counts=dict(Counter(labels)),
        ignored=ignored,
        labelled=[(w.text, label) for w, label in zip(words, labels, strict=True)],
    )


def score_language(
    response: str,
    params: LanguageParams,
    *,
    target: str | None,
    prompt: str | None = None,
    detector: WordDetector | None = None,
) -> ComponentScore:
    """The language-consistency component (DeepSeek-R1): share of the chain of thought's words in ``target``.

    Args:
        response: the completion; only its chain of thought counts (the think blocks, or all of it).
        params: minimum length and think tag.
        target: ISO 639-1 code (one of :data:`SUPPORTED_LANGUAGES`), or ``None`` to take the dominant
            language of ``prompt``.
        prompt: the question, used only when ``target`` is ``None``.
        detector: for tests and benchmarks; the process-wide lingua detector by default.

    Returns:
        ``score`` in [0, 1] with status ``ok``; or ``None`` with ``too_short`` (fewer than
        ``params.min_words`` words carry a language), ``no_target`` (no target given and none detected from
        the prompt) or ``unsupported_language`` (a target outside :data:`SUPPORTED_LANGUAGES`). ``info``
        holds ``target``, ``target_source``, ``words``, ``languages`` (shares), ``word_counts``, ``ignored``.
    """
    source = "given"
    if target is None:
        source = "prompt"
        found = analyze(prompt, detector) if prompt else None
        target = found.dominant() if found is not None and found.total >= params.min_words else None
        if found is None or target is None:
            return ComponentScore(
                None,
                "no_target",
                "no target language was given, and "
                + ("no prompt either" if found is None else f"the prompt has only {found.total} words to detect it"),
            )
    elif target not in SUPPORTED_LANGUAGES:
        return ComponentScore(
            None, "unsupported_language", f"target {target!r} is not one of {', '.join(SUPPORTED_LANGUAGES)}"
        )

    breakdown = analyze(chain_of_thought(response, params.think_tag), detector)
    info = {
        "target": target,
        "target_source": source,
        "words": breakdown.total,
        "languages": breakdown.shares(),
        "word_counts": breakdown.counts,
        "ignored": breakdown.ignored,
    }
    if breakdown.total < params.min_words:
        return ComponentScore(
            None,
            "too_short",
            f"the chain of thought has {breakdown.total} words that carry a language, under min_words "
            f"({params.min_words})",
            info,
        )
    return ComponentScore(breakdown.counts.get(target, 0) / breakdown.total, "ok", None, info)
