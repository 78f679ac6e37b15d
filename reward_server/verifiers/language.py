"""Language consistency, as DeepSeek-R1 defines it: the share of the chain of thought's words in the target.

DeepSeek-R1 (arXiv 2501.12948, section 2.3.3) adds a reward "calculated as the proportion of target
language words in the CoT". What that needs, and what is chosen here:

*Which text counts.* The chain of thought: the ``<think>`` part, or the whole completion when it has no
think tag (:func:`reward_server.verifiers.markup.chain_of_thought`). Inside it, these count for no
language, neither for nor against: fenced and inline code, code lines without fences (a line that starts
with a code keyword and ends in ``:``/``{``/``;`` or has ``(``/``=``, a line dense in code symbols, and the
indented lines under such a line), markup tags, math (``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]``, and
``\\begin{env}…\\end{env}`` for the math environments: ``equation``, ``align``, ``gather``, ``cases``,
the matrices, ``array`` ..., starred or not), URLs and e-mail addresses, and any token with a digit or a
character other than a letter, apostrophe or hyphen (numbers, file paths, ``snake_case``, ``a.b``,
``f(x)``, ``\\frac``), plus ``camelCase`` words, all-capital acronyms and one-letter words (as often a
variable as a word).

Several exceptions keep prose from hiding there. A code-looking line with a sentence's worth of prose
words and no mark of code is prose (raw math in a sentence: "Если x = 2, то f(x) = 6"). A fence that is
never closed, or is labelled as prose (````text``), is read as unfenced text. A line in capitals is
shouted prose, not a row of acronyms. The argument of ``\\text{…}`` (and ``\\textrm``,
``\\textbf``, ``\\mbox``, ``\\intertext`` ...) inside math is prose, and so is the body of any other
environment (``proof``, ``itemize``...). And a Han or kana character is a word wherever it stands outside
fenced code, inline code and math: glued into an identifier, a number, a URL, an e-mail address or an
unfenced code line (``我_们``, ``答1案``, ``if 两个数:``), it is still Chinese or Japanese, since no glue
makes ideographs an identifier. Hangul is written with spaces, so glued Hangul is an identifier, as glued
Latin is.

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
``too_short``): detectors are unreliable on a few words, and a ratio of 2 words is noise. A prompt under
``min_words`` cannot name the target either; ``default_target`` (``en`` unless set) does then. The script
is not a statistic, though: a short chain of thought with at least :data:`SCRIPT_DECISIVE_WORDS` words in a
script the target is not written in ("<think>Давайте посчитаем</think>", "<think>好的，算一下</think>" for
English) is scored, since abstaining would count it as consistent. And in a text under
:data:`SHORT_TEXT_WORDS` words, a word of the target's own script that is one of the target's common
function words ("so", "it", "is" for English) is the target's, whatever the detector says of so little text.

*Long text.* Reading costs time per word (tokens, detector, Viterbi), so at most ``max_chars`` characters
are read (20,000 by default, 32,000 at most): a longer chain of thought is read in :data:`SAMPLE_WINDOWS`
evenly spaced windows that add up to that many, from its start to its end, and the share is estimated
from them; code and math are still located in the whole text first. Every scan is linear in the text's
length, so 200,000 characters of anything are scored in about 0.3 s on an idle core at worst (all words
unseen by the detector's cache); ``python benchmarks/language_detectors.py --long`` prints the figures.

*Determinism.* No randomness anywhere: the detector is a fixed model, ties break by a fixed language order.
"""

from __future__ import annotations

import math
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import regex

from reward_server.schemas.language import DEFAULT_MAX_CHARS, SUPPORTED_LANGUAGES, LanguageParams
from reward_server.verifiers.base import ComponentScore
from reward_server.verifiers.language_mask import (
    CAMEL,
    CJK,
    CJK_CHAR,
    EDGE_PUNCT,
    NOT_CJK_OR_NEWLINE,
    SEPARATORS,
    blank_spans,
    code_line_spans,
    mask_text,
)
from reward_server.verifiers.markup import chain_of_thought

__all__ = [
    "DETECTED_LANGUAGES",
    "SAMPLE_WINDOWS",
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
# Unseen words sent to lingua per call (it holds the GIL for a whole call).
_DETECTOR_CHUNK_WORDS = 256
# Floor on a word's probability: one word alone can move the path by at most log(1/floor) = 6.9 nats.
_PROBABILITY_FLOOR = 1e-3
# Reading a long chain of thought costs time per word (tokens, detector, Viterbi); past ``max_chars`` it is
# read in this many evenly spaced windows, so a language switch late in a long text is still sampled.
SAMPLE_WINDOWS = 16
# A text is Japanese rather than Chinese when kana are at least this share of its CJK characters.
_KANA_SHARE_FOR_JAPANESE = 0.2
# Below min_words, this many words in a script the target is not written in decide the score anyway.
SCRIPT_DECISIVE_WORDS = 2
# Under this many words, the target's function words are the target's (the detector is unreliable there).
SHORT_TEXT_WORDS = 12

# The scripts each supported language is written in.
_LATIN = frozenset({"Latin"})
TARGET_SCRIPTS: dict[str, frozenset[str]] = {
    **{code: _LATIN for code in ("en", "fr", "de", "es", "pt", "it", "nl", "pl", "tr", "vi", "id", "cs", "sv")},
    "ru": frozenset({"Cyrillic"}),
    "uk": frozenset({"Cyrillic"}),
    "ar": frozenset({"Arabic"}),
    "fa": frozenset({"Arabic"}),
    "zh": frozenset({"Han"}),
    "ja": frozenset({"Han", "Hiragana", "Katakana"}),
    "ko": frozenset({"Hangul", "Han"}),
    "el": frozenset({"Greek"}),
    "he": frozenset({"Hebrew"}),
    "hi": frozenset({"Devanagari"}),
    "th": frozenset({"Thai"}),
}
# The commonest function words of the Latin-script targets (articles, pronouns, auxiliaries, conjunctions,
# prepositions): what a short chain of thought is mostly made of.
_FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset((
        "the", "an", "and", "or", "but", "so", "it", "is", "are", "was", "were", "be", "been", "am", "do",
        "does", "did", "not", "no", "yes", "this", "that", "these", "those", "there", "here", "we", "you", "he",
        "she", "they", "them", "us", "our", "your", "his", "her", "its", "me", "my", "of", "to", "in", "on",
        "at", "by", "for", "with", "from", "as", "if", "then", "than", "what", "which", "who", "how", "why",
        "when", "where", "can", "will", "would", "should", "could", "may", "might", "must", "has", "have",
        "had", "let", "okay", "ok", "well", "now", "just", "also", "all", "any", "some", "one", "two", "three"
    )),
    "fr": frozenset((
        "le", "la", "les", "un", "une", "des", "et", "ou", "mais", "donc", "est", "sont", "était", "être", "ce",
        "cette", "ces", "il", "elle", "ils", "elles", "nous", "vous", "on", "je", "tu", "de", "du", "au", "aux",
        "en", "dans", "sur", "pour", "par", "avec", "sans", "que", "qui", "quoi", "comme", "si", "alors", "pas",
        "ne", "oui", "non"
    )),
    "de": frozenset((
        "der", "die", "das", "ein", "eine", "einen", "und", "oder", "aber", "also", "ist", "sind", "war",
        "sein", "es", "er", "sie", "wir", "ihr", "ich", "du", "nicht", "ja", "nein", "von", "zu", "in", "im",
        "auf", "an", "mit", "für", "aus", "bei", "dass", "wenn", "dann", "so", "wie", "was", "wer", "den",
        "dem", "des"
    )),
    "es": frozenset((
        "el", "la", "los", "las", "un", "una", "unos", "y", "o", "pero", "entonces", "es", "son", "era", "ser",
        "esto", "este", "esta", "eso", "ese", "que", "quien", "como", "si", "no", "sí", "de", "del", "al", "en",
        "con", "por", "para", "sin", "lo", "le", "se", "nos", "yo", "tu", "él", "ella", "muy", "más"
    )),
    "pt": frozenset((
        "o", "a", "os", "as", "um", "uma", "e", "ou", "mas", "então", "é", "são", "era", "ser", "isto", "este",
        "esta", "isso", "que", "quem", "como", "se", "não", "sim", "de", "do", "da", "dos", "das", "no", "na",
        "em", "com", "por", "para", "sem", "eu", "você", "ele", "ela", "nós", "muito", "mais"
    )),
    "it": frozenset((
        "il", "lo", "la", "i", "gli", "le", "un", "una", "e", "o", "ma", "quindi", "è", "sono", "era", "essere",
        "questo", "questa", "che", "chi", "come", "se", "non", "sì", "di", "del", "della", "in", "con", "per",
        "su", "da", "io", "tu", "lui", "lei", "noi", "molto", "più"
    )),
    "nl": frozenset((
        "de", "het", "een", "en", "of", "maar", "dus", "is", "zijn", "was", "dit", "dat", "die", "wie", "hoe",
        "als", "niet", "ja", "nee", "van", "in", "op", "met", "voor", "aan", "uit", "bij", "ik", "jij", "je",
        "hij", "zij", "wij", "we", "ze", "er", "dan"
    )),
}  # fmt: skip

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

    def load(self, stop: Callable[[], bool] = lambda: False) -> bool:
        """Load the models now (a server can call this at start-up, in a thread, to spare the first request).

        lingua holds the GIL while it loads, so the models load one language at a time (at most about 0.6 s each,
        into lingua's process-wide cache) and ``stop`` is asked between two: a server told to stop while starting
        is not kept waiting for the rest (issue 24). Returns False when ``stop`` cut the load short.
        """
        if self._detector is not None:
            return True
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

        langs = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in self.languages]
        for i, language in enumerate(langs):
            if stop():
                return False
            if len(langs) > 1:  # a detector needs two languages; the second is loaded anyway, or already
                builder = LanguageDetectorBuilder.from_languages(language, langs[i - 1])
                builder = builder.with_preloaded_language_models()
                (builder.with_low_accuracy_mode() if self._low_accuracy else builder).build()
        self._lingua()  # from the cache now: milliseconds
        return True

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
            # lingua holds the GIL for a whole call (4,000 unseen words: about 0.5 s, and the server's event
            # loop stalls with it); in chunks of 256 words other threads get the GIL back every ~30 ms.
            lingua = self._lingua()
            results = [
                values
                for i in range(0, len(missing), _DETECTOR_CHUNK_WORDS)
                for values in lingua.compute_language_confidence_values_in_parallel(
                    missing[i : i + _DETECTOR_CHUNK_WORDS]
                )
            ]
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
# What is read.

_BLANK = regex.compile(r"\s")
_LAST_BLANK = regex.compile(r"(?r)\s")  # searched backwards


def _windows(text: str, max_chars: int) -> list[tuple[int, int]]:
    """The parts of ``text`` that are read: all of it up to ``max_chars``, else :data:`SAMPLE_WINDOWS` evenly
    spaced windows of at most ``max_chars / SAMPLE_WINDOWS`` characters, from its start to its end, each
    narrowed to whole words where a blank is within 64 characters of its edges."""
    if len(text) <= max_chars:
        return [(0, len(text))]
    width = max_chars // SAMPLE_WINDOWS
    stride = (len(text) - width) / (SAMPLE_WINDOWS - 1)  # > width, so the windows are disjoint
    spans = []
    for i in range(SAMPLE_WINDOWS):
        start = round(i * stride)
        end = min(start + width, len(text))
        if start > 0:
            blank = _BLANK.search(text, start - 1, min(start + 64, end))
            start = blank.end() if blank is not None else start
        if end < len(text):
            blank = _LAST_BLANK.search(text, max(start, end - 64), end)
            end = blank.end() if blank is not None else end
        spans.append((start, end))
    return spans


# ---------------------------------------------------------------------------------------------------------
# Words.

_WORD_CHARS = regex.compile(r"^[\p{L}\p{M}'’\-‐]+$")
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
_NON_CJK_ALNUM = regex.compile(f"[^{CJK}\\W_]")
# A longer run of letters is no word of any language (German compounds stop near 80); it would cost the
# detector time in proportion to its length for nothing.
_MAX_DETECTED_WORD_CHARS = 100


@dataclass(slots=True)
class _Word:
    text: str
    kind: str  # "detect", "han", or a language code ("ja", "ko", ..., "other")
    sentence: int


def _words(masked: str, sentence: int = 0) -> tuple[list[_Word], int, int]:
    """The words that carry a language, in order; the count of tokens that carry none; the next sentence
    number (sentences are numbered from ``sentence``)."""
    words: list[_Word] = []
    ignored = 0
    for line in masked.split("\n"):
        cores = [
            (EDGE_PUNCT.sub("", piece), len(_SENTENCE_END.findall(piece)))
            for chunk in line.split()
            for piece in SEPARATORS.split(chunk)
        ]
        shouted = _shouted(core for core, _ in cores)
        for core, ends in cores:
            if core:
                ignored += _piece_words(core, sentence, words, shouted)
            # A sentence ends at ".", "。" and the like; Han characters take their sentence's kana into account.
            sentence += ends
        sentence += 1
    return words, ignored, sentence


# A line whose words are mostly in capitals is shouted prose, not a row of acronyms: its capitalised words
# count (else a chain of thought in capitals would carry no language at all, and the check would abstain).
_SHOUTED_MIN_WORDS = 3
_SHOUTED_SHARE = 0.6


def _shouted(cores: Iterable[str]) -> bool:
    words = [c for c in cores if len(c) > 1 and _WORD_CHARS.match(c) and CJK_CHAR.search(c) is None]
    upper = sum(w.isupper() for w in words)
    return upper >= _SHOUTED_MIN_WORDS and upper >= _SHOUTED_SHARE * len(words)


def _piece_words(core: str, sentence: int, words: list[_Word], shouted: bool = False) -> int:
    """Append the words of one token to ``words``; return how many tokens it holds that carry no language.

    ``shouted``: the token's line is in capitals, so an all-capital word is a word, not an acronym."""
    has_cjk = CJK_CHAR.search(core) is not None
    acronym = len(core) > 1 and core.isupper() and not has_cjk and not shouted
    if not _WORD_CHARS.match(core) or CAMEL.search(core) or acronym:
        # An identifier, number, path, acronym... carries no language, but its Han and kana characters
        # do: "我_们_的" or "答1案" is Chinese written with glue, not an identifier.
        if has_cjk:
            words.extend(
                _Word(run.group(0), _cjk_kind(run.lastgroup, core), sentence)
                for run in _RUNS.finditer(core)
                if run.lastgroup in ("han", "kana")
            )
        return 1 if not has_cjk or _NON_CJK_ALNUM.search(core) else 0
    if not core.isascii() and _MIXED_SCRIPT.search(core) is not None:
        return _mixed_script_words(core, sentence, words)
    ignored = 0
    for run in _RUNS.finditer(core):
        kind = run.lastgroup or "other"
        text = run.group(0).strip("'’-‐")
        if kind not in ("han", "kana") and len(text) < 2:
            ignored += 1  # one-letter words: as often a variable (x, n, к) as a word
            continue
        if kind == "detect" and len(text) > _MAX_DETECTED_WORD_CHARS:
            ignored += 1
            continue
        words.append(_Word(text, _cjk_kind(kind, core) if kind in ("han", "kana") else kind, sentence))
    return ignored


_HANGUL = regex.compile(r"\p{Hangul}")


def _cjk_kind(kind: str | None, core: str) -> str:
    """The kind of a Han or kana character of the token ``core``: kana is Japanese; Han in a token with
    Hangul is Korean Hanja ("三角形의", "삼각형(三角形)"); other Han is decided by its sentence (``han``)."""
    if kind == "kana":
        return "ja"
    return "ko" if _HANGUL.search(core) is not None else "han"


# Scripts written with spaces whose letters never join another script's inside a word. A word that does
# ("Lеt" with a Cyrillic "е", "Wιr" with a Greek iota) is made of homoglyphs: read as Latin it would be
# English to the detector, read by script it would fall apart into one-letter pieces that carry no language.
# Hangul is left out: Korean attaches particles to Latin loanwords ("API를", "Python을").
_SPACED_SCRIPTS = ("Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Devanagari", "Thai", "Armenian", "Georgian")
_MIXED_SCRIPT = regex.compile(
    "(?V1)"
    + "|".join(
        f"\\p{{{script}}}\\p{{M}}*[\\p{{L}}--\\p{{{script}}}--[{CJK}\\p{{Hangul}}]]" for script in _SPACED_SCRIPTS
    )
)
# A homoglyph word of fewer letters is as likely a unit ("μm", "kΩ"), and counts for no language.
_MIXED_SCRIPT_MIN_LETTERS = 3


def _mixed_script_words(core: str, sentence: int, words: list[_Word]) -> int:
    """Append the words of a token whose letters mix scripts: its Han, kana and Hangul as usual, and the
    rest as one word of no supported language (``other``), so homoglyphs count against every target."""
    letters = 0
    for run in _RUNS.finditer(core):
        kind = run.lastgroup or "other"
        if kind in ("han", "kana"):
            words.append(_Word(run.group(0), _cjk_kind(kind, core), sentence))
        elif kind == "ko" and len(run.group(0)) >= 2:
            words.append(_Word(run.group(0), "ko", sentence))
        elif kind != "ko":
            letters += len(run.group(0))
    if letters >= _MIXED_SCRIPT_MIN_LETTERS:
        words.append(_Word(core, "other", sentence))
        return 0
    return 1


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
        chars_read: characters whose words were read (all of ``chars`` unless it was over ``max_chars``).
        chars: characters in the text.
    """

    counts: dict[str, int]
    ignored: int
    labelled: list[tuple[str, str]] = field(repr=False)
    chars_read: int = 0
    chars: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def shares(self) -> dict[str, float]:
        total = self.total
        return {lang: n / total for lang, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))}

    def dominant(self) -> str | None:
        """The language with the most words (ties: alphabetical), or ``None`` for no words."""
        return min(self.counts, key=lambda lang: (-self.counts[lang], lang)) if self.counts else None


# Characters that render as nothing (zero-width space and joiners, word joiner, soft hyphen, BOM, variation
# selectors ...): inserted between letters they would split a word into one-letter pieces that carry no
# language, or make it unknown to the detector, so a foreign chain of thought could vanish from the count.
_INVISIBLE = regex.compile(r"\p{Default_Ignorable_Code_Point}+")


def _normalised(text: str) -> str:
    """``text`` without invisible characters, in NFKC: composed accents, and full-width or mathematical
    letters (``ｈｅｌｌｏ``, ``𝐡𝐞𝐥𝐥𝐨``) as the plain letters they stand for."""
    return unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))


def analyze(
    text: str, detector: WordDetector | None = None, max_chars: int = DEFAULT_MAX_CHARS, target: str | None = None
) -> LanguageBreakdown:
    """Label every word of ``text`` that carries a language (see the module docstring for the rules).

    Args:
        text: the text to read (extract the chain of thought first).
        detector: word probabilities for Latin/Cyrillic/Arabic words; :func:`default_detector` when ``None``.
        max_chars: most characters whose words are read; a longer text is read in :data:`SAMPLE_WINDOWS`
            evenly spaced windows that add up to this many (code and math are still found in all of it).
        target: the language the text should be in, if known: in a text under :data:`SHORT_TEXT_WORDS`
            words, the target's function words are labelled the target whatever the detector says.
    """
    text = _normalised(text)
    masked = mask_text(text)
    windows = _windows(masked, max_chars)
    words: list[_Word] = []
    ignored = 0
    sentence = 0
    for start, end in windows:
        window = masked[start:end]
        # Code lines are found per window: the rule looks at one line and the line above it.
        window_words, window_ignored, sentence = _words(
            blank_spans(window, code_line_spans(window), keep=NOT_CJK_OR_NEWLINE), sentence
        )
        words.extend(window_words)
        ignored += window_ignored
    labels: list[str] = [w.kind for w in words]

    detect = [i for i, w in enumerate(words) if w.kind == "detect"]
    if detect:
        detector = detector or default_detector()
        probs = detector.probabilities([words[i].text for i in detect])
        trusted: set[int] = set()
        if target in detector.languages and len(words) < SHORT_TEXT_WORDS:
            # "So it is": in a short text the target's function words are the target's, whatever the detector
            # makes of three words. The other words keep the detector's labels: "Es ist gut so" stays German
            # but for its "so".
            function_words = _FUNCTION_WORDS.get(str(target), frozenset())
            trusted = {n for n, i in enumerate(detect) if words[i].text.lower() in function_words}
        log_probs = [[math.log(p + _PROBABILITY_FLOOR) for p in row] for row in probs]
        for n, (i, label) in enumerate(zip(detect, _viterbi(log_probs, SWITCH_PENALTY), strict=True)):
            labels[i] = str(target) if n in trusted else detector.languages[label]

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
        chars_read=sum(end - start for start, end in windows),
        chars=len(text),
    )


_SCRIPT = regex.compile(
    r"(?P<Han>\p{Han})|(?P<Hiragana>\p{Hiragana})|(?P<Katakana>\p{Katakana}|ー)|(?P<Hangul>\p{Hangul})"
    r"|(?P<Latin>\p{Latin})|(?P<Cyrillic>\p{Cyrillic})|(?P<Arabic>\p{Arabic})|(?P<Greek>\p{Greek})"
    r"|(?P<Hebrew>\p{Hebrew})|(?P<Devanagari>\p{Devanagari})|(?P<Thai>\p{Thai})"
)


def _other_script_words(breakdown: LanguageBreakdown, target: str) -> int:
    """Words of the breakdown written in a script the target language is not written in."""
    scripts = TARGET_SCRIPTS.get(target, frozenset())
    count = 0
    for word, _label in breakdown.labelled:
        m = _SCRIPT.search(word)
        if m is None or m.lastgroup not in scripts:
            count += 1
    return count


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
        params: minimum length, think tag, default target and how much of a long text is read.
        target: ISO 639-1 code (one of :data:`SUPPORTED_LANGUAGES`), or ``None`` to take the dominant
            language of ``prompt``, or ``params.default_target`` when the prompt has under ``min_words``
            words that carry a language (or there is no prompt).
        prompt: the question, used only when ``target`` is ``None``.
        detector: for tests and benchmarks; the process-wide lingua detector by default.

    Returns:
        ``score`` in [0, 1] with status ``ok``; or ``None`` with ``too_short`` (fewer than
        ``params.min_words`` words carry a language), ``no_target`` (no target given, none detected from
        the prompt, and ``default_target`` is null) or ``unsupported_language`` (a target outside
        :data:`SUPPORTED_LANGUAGES`). ``info`` holds ``target``, ``target_source`` (``given``, ``prompt`` or
        ``default``), ``words``, ``languages`` (shares), ``word_counts``, ``ignored``, ``chars_read``,
        ``chars``.
    """
    source = "given"
    if target is None:
        found = analyze(prompt, detector, params.max_chars) if prompt else None
        dominant = found.dominant() if found is not None and found.total >= params.min_words else None
        if dominant is not None:
            source, target = "prompt", dominant
        elif params.default_target is not None:
            source, target = "default", params.default_target
        else:
            return ComponentScore(
                None,
                "no_target",
                "no target language was given, no default_target is set, and "
                + ("no prompt either" if found is None else f"the prompt has only {found.total} words to detect it"),
            )
    elif target not in SUPPORTED_LANGUAGES:
        return ComponentScore(
            None, "unsupported_language", f"target {target!r} is not one of {', '.join(SUPPORTED_LANGUAGES)}"
        )

    breakdown = analyze(chain_of_thought(response, params.think_tag), detector, params.max_chars, target)
    info = {
        "target": target,
        "target_source": source,
        "words": breakdown.total,
        "languages": breakdown.shares(),
        "word_counts": breakdown.counts,
        "ignored": breakdown.ignored,
        "chars_read": breakdown.chars_read,
        "chars": breakdown.chars,
    }
    if breakdown.total < params.min_words and _other_script_words(breakdown, target) < SCRIPT_DECISIVE_WORDS:
        return ComponentScore(
            None,
            "too_short",
            f"the chain of thought has {breakdown.total} words that carry a language, under min_words "
            f"({params.min_words})",
            info,
        )
    return ComponentScore(breakdown.counts.get(target, 0) / breakdown.total, "ok", None, info)


assert set(TARGET_SCRIPTS) == set(SUPPORTED_LANGUAGES)
