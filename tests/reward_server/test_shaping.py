"""Shaping rewards against values computed by hand from the papers' equations."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from reward_server.schemas.shaping import CosineParams, OverlongParams, RepetitionParams
from reward_server.verifiers.shaping import (
    cosine_scaled,
    ngram_repetition,
    score_cosine,
    score_overlong,
    score_repetition,
    soft_overlong_punishment,
)

OVERLONG = OverlongParams(max_completion_length=100, soft_punish_cache=20)


# DAPO eq. 13 with L_max = 100, L_cache = 20: 0 up to 80, then (80 - L) / 20, then -1 past 100.
@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (79, 0.0), (80, 0.0), (81, -0.05), (90, -0.5), (95, -0.75), (100, -1.0), (101, -1.0), (5000, -1.0)],
)
def test_overlong_on_tokens(length: int, expected: float) -> None:
    result = score_overlong("ignored when tokens are given", OVERLONG, num_tokens=length)
    assert result.score == pytest.approx(expected)
    assert result.info == {"length": length, "length_source": "num_tokens"}


def test_overlong_on_characters() -> None:
    # 360 characters / 4 per token = 90 "tokens" -> (80 - 90) / 20 = -0.5.
    result = score_overlong("x" * 360, OVERLONG, num_tokens=None)
    assert result.score == pytest.approx(-0.5) and result.info["length_source"] == "characters"
    # Measured in characters (1 per token): 360 > 100 -> -1.
    params = OverlongParams(max_completion_length=100, soft_punish_cache=20, chars_per_token=1)
    assert score_overlong("x" * 360, params, num_tokens=None).score == -1.0
    assert score_overlong("x" * 70, params, num_tokens=None).score == 0.0


def test_overlong_without_buffer_is_a_hard_cut() -> None:
    assert soft_overlong_punishment(100, 100, 0) == 0.0
    assert soft_overlong_punishment(101, 100, 0) == -1.0


COSINE = CosineParams(max_completion_length=100)


# Yeo et al. eq. 1-2, open-r1's defaults: correct 1.0 -> 0.5, wrong -1.0 -> -0.5 over [0, 100].
@pytest.mark.parametrize(
    ("length", "correct", "expected"),
    [
        (0, True, 1.0),
        (50, True, 0.75),  # cos(pi/2) = 0: 0.5 + 0.5 * 0.5 * 1
        (25, True, 0.5 + 0.25 * (1 + math.sqrt(2) / 2)),  # 0.92678
        (75, True, 0.5 + 0.25 * (1 - math.sqrt(2) / 2)),  # 0.57322
        (0, False, -1.0),
        (50, False, -0.75),
        (25, False, -0.5 - 0.25 * (1 + math.sqrt(2) / 2)),  # -0.92678: short wrong answers cost most
        (100, True, -1.0),  # r_e: reached L_max
        (150, False, -1.0),
    ],
)
def test_cosine(length: int, correct: bool, expected: float) -> None:
    result = score_cosine("", COSINE, correct=correct, num_tokens=length)
    assert result.status == "ok" and result.score == pytest.approx(expected)


def test_cosine_needs_the_accuracy_verdict() -> None:
    result = score_cosine("some text", COSINE, correct=None, num_tokens=10)
    assert result.score is None and result.status == "no_accuracy"


def test_cosine_on_characters_and_paper_values() -> None:
    # 200 characters / 4 = 50 "tokens"; the paper's ends r_0^c = 2, r_L^c = 1 give 1.5 at mid-length.
    params = CosineParams(max_completion_length=100, correct_at_zero=2.0, correct_at_max=1.0)
    assert score_cosine("y" * 200, params, correct=True, num_tokens=None).score == pytest.approx(1.5)
    assert cosine_scaled(100, 100, 2.0, 1.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("a b a b a b", 2, 0.6),  # 5 bigrams: ab ba ab ba ab -> 2 unique
        ("The cat sat. the CAT sat", 3, 0.25),  # 4 trigrams, 3 unique; case and punctuation ignored
        ("one two three four", 2, 0.0),
        ("too short", 3, 0.0),
        ("好好好好", 2, 2 / 3),  # each Han character is a word: 3 bigrams, 1 unique
        # Thai has no spaces either: each character is a word. "สวัสดี" x 3 is 18 characters (the vowel
        # signs and tone marks too), 16 trigrams, of which the first 6 are unique: 1 - 6/16.
        ("สวัสดี" * 3, 3, 1 - 6 / 16),
        ("ສະບາຍດີ" * 2, 2, 1 - 7 / 13),  # Lao: 14 characters, 13 bigrams, 7 unique
        ("🤔🤔🤔🤔🤔", 1, 4 / 5),  # an emoji is a word: 5 unigrams, 1 unique
        ("ok 🎉 ok 🎉 ok 🎉", 2, 3 / 5),  # ok🎉 🎉ok ok🎉 🎉ok ok🎉: 2 unique of 5
        ("!!!!!! ?????? ......", 1, 0.0),  # punctuation is not a word: no unigram at all
        ("", 1, 0.0),
    ],
)
def test_ngram_repetition(text: str, n: int, expected: float) -> None:
    assert ngram_repetition(text, n) == pytest.approx(expected)


def test_repetition_score_scales_max_penalty() -> None:
    params = RepetitionParams(ngram_size=2, max_penalty=-0.5)
    assert score_repetition("a b a b a b", params).score == pytest.approx(-0.3)
    no_repeat = score_repetition("one two three", params)
    assert no_repeat.score == 0.0 and math.copysign(1, no_repeat.score) == 1.0


@pytest.mark.parametrize(
    ("model", "params", "field"),
    [
        (OverlongParams, {"max_completion_length": 10, "soft_punish_cache": 11}, "soft_punish_cache"),
        (OverlongParams, {"max_completion_length": 0}, "max_completion_length"),
        (OverlongParams, {"cache": 5}, "cache"),
        (CosineParams, {"chars_per_token": 0}, "chars_per_token"),
        (RepetitionParams, {"max_penalty": 0.5}, "max_penalty"),
        (RepetitionParams, {"ngram_size": 0}, "ngram_size"),
    ],
)
def test_bad_params_name_the_field(model: type, params: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        model(**params)
    assert field in str(info.value)
