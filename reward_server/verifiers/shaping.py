"""Shaping rewards on length and repetition: DAPO's overlong punishment, cosine scaling, n-gram repetition.

Lengths are in tokens when the client sends ``num_tokens`` (the trainer knows them exactly); otherwise they
are estimated from characters as ``len(response) / chars_per_token``. ``info["length_source"]`` says which.
"""

from __future__ import annotations

import math

import regex

from reward_server.schemas.shaping import CosineParams, OverlongParams, RepetitionParams
from reward_server.verifiers.base import ComponentScore

__all__ = [
    "cosine_scaled",
    "ngram_repetition",
    "score_cosine",
    "score_overlong",
    "score_repetition",
    "soft_overlong_punishment",
]


def _length(response: str, num_tokens: int | None, chars_per_token: float) -> tuple[float, dict[str, object]]:
    if num_tokens is not None:
        return float(num_tokens), {"length": num_tokens, "length_source": "num_tokens"}
    length = len(response) / chars_per_token
    return length, {"length": length, "length_source": "characters"}


def soft_overlong_punishment(length: float, max_length: int, cache: int) -> float:
    """DAPO's soft overlong punishment, arXiv 2503.14476 eq. 13.

    ``0`` for ``length <= L_max - L_cache``; ``((L_max - L_cache) - length) / L_cache`` (from 0 down to -1)
    inside the buffer; ``-1`` beyond ``L_max``. ``length``, ``max_length`` (L_max) and ``cache`` (L_cache) in
    the same unit.
    """
    start = max_length - cache
    if length <= start:
        return 0.0
    if length <= max_length:
        return (start - length) / cache
    return -1.0


def cosine_scaled(length: float, max_length: int, at_zero: float, at_max: float) -> float:
    """Yeo et al. 2025 (arXiv 2502.03373) eq. 2: a half cosine from ``at_zero`` (length 0) to ``at_max``.

    ``CosFn(t, T) = at_max + (at_zero - at_max) * (1 + cos(t * pi / T)) / 2``, with ``t`` clipped to ``T``.
    The paper writes it with ``eta_min``/``eta_max``; here the ends are named by where they apply, so a
    decreasing curve (correct answers: shorter is better) and an increasing one (wrong answers: longer is
    less bad) are the same call.
    """
    t = min(max(length, 0.0), float(max_length))
    return at_max + 0.5 * (at_zero - at_max) * (1.0 + math.cos(t * math.pi / max_length))


def score_overlong(response: str, params: OverlongParams, *, num_tokens: int | None) -> ComponentScore:
    """The ``overlong`` component: :func:`soft_overlong_punishment` of the completion's length, in [-1, 0].

    Args:
        num_tokens: the completion's length in tokens, when the client knows it; else estimated from
            characters (``params.chars_per_token``).
    """
    length, info = _length(response, num_tokens, params.chars_per_token)
    score = soft_overlong_punishment(length, params.max_completion_length, params.soft_punish_cache)
    return ComponentScore(score, "ok", None, info)


def score_cosine(
    response: str, params: CosineParams, *, correct: bool | None, num_tokens: int | None
) -> ComponentScore:
    """The ``cosine`` component: Yeo et al. 2025 eq. 1, length-scaled reward by correctness.

    ``R = r_e`` when the length reaches ``L_max``; else :func:`cosine_scaled` between ``correct_at_zero``
    and ``correct_at_max`` for a correct answer, ``wrong_at_zero`` and ``wrong_at_max`` for a wrong one.

    Args:
        correct: the accuracy verdict (the composer passes it); ``None`` when accuracy could not be scored,
            which makes this ``None`` too (status ``no_accuracy``), never a wrong-answer score.
        num_tokens: as in :func:`score_overlong`.
    """
    length, info = _length(response, num_tokens, params.chars_per_token)
    if correct is None:
        return ComponentScore(
            None, "no_accuracy", "cosine scaling needs the accuracy verdict, which could not be scored", info
        )
    if length >= params.max_completion_length:
        return ComponentScore(params.exceed_penalty, "ok", "reached max_completion_length", info)
    if correct:
        score = cosine_scaled(length, params.max_completion_length, params.correct_at_zero, params.correct_at_max)
    else:
        score = cosine_scaled(length, params.max_completion_length, params.wrong_at_zero, params.wrong_at_max)
    return ComponentScore(score, "ok", None, {**info, "correct": correct})


# A word: a run of letters, digits, marks, "_" or "'". In the scripts written without spaces (Chinese,
# Japanese, Thai, Lao, Khmer, Burmese) each character is a word on its own, as in the language component:
# as runs, a Thai loop of one phrase was one long "word" and never repeated. An emoji is a word too, so a
# loop of emoji is a loop. Punctuation is not ("The cat sat. the cat sat" repeats "the cat sat").
_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_TOKENS = regex.compile(rf"[{_UNSPACED}]|\p{{Extended_Pictographic}}|(?:(?![{_UNSPACED}])[\p{{L}}\p{{M}}\p{{N}}_'])+")


def ngram_repetition(text: str, n: int) -> float:
    """Share of the word n-grams of ``text`` that repeat an earlier one: ``1 - unique / total``, in [0, 1).

    Words are lowercased; 0.0 when the text has fewer than ``n`` words.
    """
    words = _TOKENS.findall(text.lower())
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def score_repetition(response: str, params: RepetitionParams) -> ComponentScore:
    """The ``repetition`` component: ``max_penalty * ngram_repetition(response, ngram_size)``, in [max_penalty, 0]."""
    repeated = ngram_repetition(response, params.ngram_size)
    # "+ 0.0" turns -0.0 (no repetition times a negative penalty) into 0.0 for clients that print it.
    return ComponentScore(params.max_penalty * repeated + 0.0, "ok", None, {"repeated_share": repeated})
