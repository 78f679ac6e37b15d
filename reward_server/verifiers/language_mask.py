"""Which text of a chain of thought counts for a language: code, math, markup, URLs and e-mail addresses are
blanked to spaces of the same length (so offsets and lines survive), with the exceptions that keep prose from
hiding there; :mod:`reward_server.verifiers.language` says what counts and why, and reads the words that are
left. Also the separators and patterns that cut a whitespace token into words, which both sides use."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from functools import partial

import regex

from reward_server.verifiers.markup import code_spans

# Separators inside a whitespace token: sentence punctuation, and every CJK / full-width punctuation mark
# (Chinese and Japanese write "，" and "。" with no space around them).
SEPARATORS = regex.compile(r"[,;!?\"“”«»„‚‹›…—–\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]+")
EDGE_PUNCT = regex.compile(r"^[\p{P}\p{S}]+|[\p{P}\p{S}]+$")
CAMEL = regex.compile(r"\p{Ll}\p{Lu}")

# Every scan here is linear in the text: a delimiter is paired with the next closer found by one forward
# search, and a failed search ends the pass (no later opener can find a closer either). The lazy DOTALL
# regexes this replaces (``\\\(.+?\\\)``) retried from every unclosed opener, which made ``"\\(" * 99_500``
# take a minute while holding the GIL.

# Environments whose body is mathematics. Any other environment (``proof``, ``itemize``, a made-up
# ``note``) holds prose, so its words count; its ``\begin{…}`` and ``\end{…}`` are tokens that carry none.
_MATH_ENVIRONMENT = re.compile(
    r"(?:equation|align|alignat|flalign|gather|multline|eqnarray|split|aligned|alignedat|gathered|cases|dcases|"
    r"rcases|[pbBvV]?matrix|smallmatrix|array|subarray|subequations|math|displaymath|CD)\*?"
)
# A name is at most 32 characters, so an unclosed ``\begin{`` costs a bounded look-ahead.
_ENVIRONMENT_TOKEN = re.compile(r"\\(begin|end)\{([^}\n]{1,32})\}")
_INLINE_DOLLARS = re.compile(r"\$(?=\S)[^$\n]*?\S\$|\$\S\$")
# Text inside mathematics: the argument of these commands is prose (``$\text{so the area is}$``).
_TEXT_COMMAND = re.compile(
    r"\\(?:text(?:rm|bf|it|sf|tt|up|sl|sc|md|normal)?|mbox|hbox|intertext|shortintertext)(?![A-Za-z])\s*+\{"
)
_BRACE = re.compile(r"\\.|[{}]", re.DOTALL)
# Han and kana: every character is a word (see the module docstring), so no glue hides them (below).
CJK = r"\p{Han}\p{Hiragana}\p{Katakana}ー"
CJK_CHAR = regex.compile(f"[{CJK}]")
NOT_CJK_OR_NEWLINE = regex.compile(f"[^\\n{CJK}]+")
# Inside math, letters of the scripts that mathematics does not write with are words: Han, kana and
# Hangul, and runs of Cyrillic, Arabic, Hebrew, Devanagari or Thai ("$давайте посчитаем$",
# "$S_{осн}$"). Latin and Greek are the alphabets of math notation (``$abc$``, ``$\\alpha\\beta$``), so
# they stay masked.
_NOT_PROSE_SCRIPT_OR_NEWLINE = regex.compile(
    f"[^\\n{CJK}\\p{{Hangul}}\\p{{Cyrillic}}\\p{{Arabic}}\\p{{Hebrew}}\\p{{Devanagari}}\\p{{Thai}}]+"
)
# Bounded parts (a scheme is at most 32 characters, an e-mail's local part 64 as RFC 5321 allows), so a
# long run of "a.a.a." costs a bounded look-ahead from each word boundary instead of a scan to its end.
_URLS = re.compile(
    r"\b(?:[a-z][a-z0-9+.-]{0,31}://|www\.)\S+|\b[\w.+-]{1,64}@[\w-]{1,63}+(?:\.[\w-]{1,63}+)++", re.IGNORECASE
)
_KEYWORDS = frozenset(
    {
        "def", "class", "return", "import", "from", "elif", "else", "try", "except", "finally", "raise", "lambda",
        "print", "function", "const", "let", "var", "fn", "func", "pub", "public", "private", "protected",
        "static", "void", "int", "long", "double", "float", "bool", "char", "auto", "struct", "enum", "package",
        "using", "namespace", "template", "for", "while", "if", "switch", "case",
    }
)  # fmt: skip
_CODE_KEYWORD = re.compile(r"^\s*(?:" + "|".join(sorted(_KEYWORDS)) + r"|#include|#define|@\w+)\b")
# A markup tag such as "<answer>" or "</think>" (in a completion without think tags, or left in code that the
# format check skipped) is layout, not a word.
_MARKUP_TAG = re.compile(r"</?[A-Za-z][\w.:-]{0,31}\s*/?>")
_CODE_SYMBOLS = frozenset("=(){}[];<>+*/%&|^~!")
# Marks of code that mathematics written inline does not use (not "!=", "||", "=>" or "->": math in ASCII
# writes those for "not equal", a norm, "implies" and a limit).
_CODE_MARKER = re.compile(r";\s*\}?\s*$|\{\s*$|^\s*\}|==|\+=|-=|\*=|/=|&&|\w\.\w+\(")
_PROSE_WORD = regex.compile(r"^\p{L}[\p{L}\p{M}'’\-‐]*\p{L}$")
# A line that is dense in symbols but has at least this many prose words, and none of the marks of code, is
# prose: "If x = 2, then f(x) = 6, so the slope is six" is as dense in symbols as code, but code has one
# or two bare words a line (identifiers), not a sentence. Its math and identifiers count for no language
# anyway, token by token.
_PROSE_WORDS_MATH_LINE = 2
# A line that starts with a code keyword, without the marks of a block (":", "{", ";" at its end), is prose
# from this many prose words: "for each pair (a, b) we count the ways" against "print(total, count)".
_PROSE_WORDS_CODE_LINE = 5


def _prose_words(stripped: str) -> int:
    """Words on the line that read as prose: two or more letters, not camelCase, not a code keyword."""
    count = 0
    for chunk in stripped.split():
        for piece in SEPARATORS.split(chunk):
            core = EDGE_PUNCT.sub("", piece)
            if _PROSE_WORD.match(core) and not CAMEL.search(core) and core not in _KEYWORDS:
                count += 1
    return count


def _is_code_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    marked = _CODE_MARKER.search(stripped) is not None
    if _CODE_KEYWORD.match(line):
        if stripped[-1] in ":{;" or marked:
            return True
        if "(" in stripped or "=" in stripped:
            return _prose_words(stripped) < _PROSE_WORDS_CODE_LINE
    chars = [c for c in stripped if not c.isspace()]
    symbols = sum(c in _CODE_SYMBOLS for c in chars)
    if not (symbols / len(chars) >= 0.15 and any(c in "=(){}[];" for c in chars)):
        return False
    return marked or _prose_words(stripped) < _PROSE_WORDS_MATH_LINE


def code_line_spans(text: str) -> list[tuple[int, int]]:
    """Code written without fences: code-looking lines and the indented lines under them."""
    spans = []
    offset = 0
    previous_code = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if body.strip():
            indented = body[:1] in ("\t",) or body.startswith("  ")
            code = _is_code_line(body) or (
                previous_code and indented and _prose_words(body.strip()) < _PROSE_WORDS_CODE_LINE
            )
            if code:
                spans.append((offset, offset + len(body)))
            previous_code = code
        offset += len(line)
    return spans


def blank_spans(text: str, spans: list[tuple[int, int]], *, keep: regex.Pattern[str] | None = None) -> str:
    """``text`` with ``spans`` (sorted, disjoint) turned into spaces; newlines stay, and so does what the
    pattern ``keep`` (of what to blank) leaves, e.g. Han and kana with ``NOT_CJK_OR_NEWLINE``. Same length,
    so offsets and lines survive."""
    if not spans:
        return text
    parts = []
    last = 0
    for start, end in spans:
        parts.append(text[last:start])
        piece = text[start:end]
        if keep is not None:
            parts.append(keep.sub(lambda m: " " * len(m.group(0)), piece))
        else:
            parts.append("\n".join(" " * len(line) for line in piece.split("\n")))
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _delimited(text: str, opener: str, closer: str) -> list[tuple[int, int]]:
    """Spans from ``opener`` to the first ``closer`` after at least one character, left to right."""
    spans = []
    position = 0
    while (start := text.find(opener, position)) >= 0:
        end = text.find(closer, start + len(opener) + 1)
        if end < 0:
            break  # no closer after this opener, so none after any later one
        position = end + len(closer)
        spans.append((start, position))
    return spans


def _environment_spans(text: str) -> list[tuple[int, int]]:
    """``\\begin{env}…\\end{env}`` of math environments, each closed by the first matching ``\\end``."""
    begins = []
    ends: dict[str, list[int]] = {}  # environment -> start offsets of its \end tokens, ascending
    end_of: dict[int, int] = {}
    for match in _ENVIRONMENT_TOKEN.finditer(text):
        if not _MATH_ENVIRONMENT.fullmatch(match.group(2)):
            continue
        if match.group(1) == "begin":
            begins.append(match)
        else:
            ends.setdefault(match.group(2), []).append(match.start())
            end_of[match.start()] = match.end()
    spans = []
    position = 0
    for begin in begins:
        if begin.start() < position:
            continue
        closers = ends.get(begin.group(2), [])
        i = bisect.bisect_left(closers, begin.end())
        if i < len(closers):
            position = end_of[closers[i]]
            spans.append((begin.start(), position))
    return spans


def _inline_dollar_spans(text: str) -> list[tuple[int, int]]:
    # Linear: the lazy part cannot cross a "$" or a newline, so each "$" scans only up to the next one.
    return [m.span() for m in _INLINE_DOLLARS.finditer(text)]


# Applied in this order, each to the text that the previous ones blanked (as "$$" must go before "$").
_MATH_FINDERS: tuple[Callable[[str], list[tuple[int, int]]], ...] = (
    partial(_delimited, opener="$$", closer="$$"),
    partial(_delimited, opener="\\[", closer="\\]"),
    partial(_delimited, opener="\\(", closer="\\)"),
    _environment_spans,
    _inline_dollar_spans,
)


def _outside_text_arguments(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the math ``spans`` that are not inside the argument of a ``\\text``-like command."""
    parts = []
    for start, end in spans:
        cursor = start
        while (command := _TEXT_COMMAND.search(text, cursor, end)) is not None:
            parts.append((cursor, command.end()))  # the math, and the command up to its "{"
            depth = 1
            cursor = end  # an unclosed argument runs to the end of the math
            for brace in _BRACE.finditer(text, command.end(), end):
                depth += {"{": 1, "}": -1}.get(brace.group(0), 0)
                if depth == 0:
                    cursor = brace.start()
                    break
        parts.append((cursor, end))
    return [(a, b) for a, b in parts if a < b]


# Inline code that holds a sentence: no mark of code in it, and at least this many words (each Han or kana
# character a word). "`Die Lösung ist einfach, weil die Summe neunzig ist.`" is prose in backticks, and
# counting it for no language would let a chain of thought hide a foreign sentence there.
_PROSE_WORDS_INLINE = 5
_INLINE_CODE_MARK = re.compile(r"[=(){}\[\];<>\\$#@|&*^%~+/_]|\w\.\w")


def _inline_prose(body: str) -> bool:
    """Whether the inside of an inline code span reads as a sentence rather than code."""
    if _INLINE_CODE_MARK.search(body) is not None:
        return False
    return _prose_words(body) + len(CJK_CHAR.findall(body)) >= _PROSE_WORDS_INLINE


def _code_to_blank(text: str) -> list[tuple[int, int]]:
    """The code spans the language check blanks: fenced and inline code, except inline prose (only its
    backticks are blanked then)."""
    spans = []
    for start, end in code_spans(text, prose_fences=True):
        piece = text[start:end]
        if piece.startswith("`") and "\n" not in piece and "\r" not in piece:
            inner = piece.strip("`")
            if inner and _inline_prose(inner):
                ticks = (len(piece) - len(inner)) // 2
                spans += [(start, start + ticks), (end - ticks, end)]
                continue
        spans.append((start, end))
    return spans


def mask_text(text: str) -> str:
    text = blank_spans(text, _code_to_blank(text))
    for find in _MATH_FINDERS:
        text = blank_spans(text, _outside_text_arguments(text, find(text)), keep=_NOT_PROSE_SCRIPT_OR_NEWLINE)
    # URLs, markup tags and code written without fences are guesses about Latin-script tokens; a Han or
    # kana character in one is still a word (no glue makes ideographs an identifier), so those are kept.
    spans = sorted(m.span() for pattern in (_URLS, _MARKUP_TAG) for m in pattern.finditer(text))
    return blank_spans(text, _merged(spans), keep=NOT_CJK_OR_NEWLINE)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ``spans`` with overlapping ones merged."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
