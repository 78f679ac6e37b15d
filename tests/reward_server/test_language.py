"""The language-consistency verifier: the shared cases, their kinds, the multilingual set, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reward_server.schemas.language import SUPPORTED_LANGUAGES, LanguageParams
from reward_server.verifiers.language import DETECTED_LANGUAGES, analyze, score_language
from tests.conftest import REPO_ROOT, cases_dir, require_file

PARAMS = LanguageParams()
MULTILINGUAL = Path(__file__).parent / "data" / "multilingual.jsonl"


def _consistent(score: float | None) -> bool:
    """The cases' "consistent": not flagged, i.e. abstained or (almost) all words in the target."""
    return score is None or score > 0.99


def _cases() -> list[dict]:
    path = cases_dir() / "language.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_shared_case(case: dict) -> None:
    require_file(cases_dir() / "language.jsonl")
    result = score_language(case["input"]["completion"], PARAMS, target=case["input"]["target_language"])
    expected = case["expected"]
    assert _consistent(result.score) is expected["consistent"], (result, expected)
    if "score_min" in expected:
        assert result.score is not None and result.score >= expected["score_min"]
    if "score_max" in expected:
        assert result.score is not None and result.score <= expected["score_max"]


def test_shared_cases_present() -> None:
    require_file(cases_dir() / "language.jsonl")
    assert len(_cases()) >= 5


# Variants of each case's kind, with other languages and values: (completion, target, low, high, reason).
KIND_VARIANTS = [
    ("<think>Сначала посчитаем все предметы на картинке, их ровно три.</think> 3", "en", 0.0, 0.1, "001: Russian CoT"),
    ("<think>まず、絵の中の物をすべて数えます。全部で三つあります。</think> 3", "en", 0.0, 0.1, "001: Japanese CoT"),
    ("<think>أولا نعد كل الأشياء في الصورة، وهناك ثلاثة أشياء فقط.</think> 3", "en", 0.0, 0.1, "001: Arabic CoT"),
    ("<think>The picture shows three objects, so I count three of them.</think> 3", "zh", 0.0, 0.1, "001 reversed"),
    (
        "<think>\nTry it in JavaScript:\nfunction triple(n) {\n  return n * 3;\n}\n"
        "So seven becomes twenty one.\n</think>",
        "en",
        1.0,
        1.0,
        "002: unfenced JS",
    ),
    (
        "<think>\n先写代码：\n```python\n# the helper doubles its input\ndef double(x):\n    return 2 * x\n```\n"
        "所以二十一变成四十二。\n</think>",
        "zh",
        1.0,
        1.0,
        "002: English code comment inside a fence, Chinese CoT",
    ),
    (
        "<think>Call `Math.floor(x / 2)` then `parseInt(value, 10)` to get the half.</think>",
        "en",
        1.0,
        1.0,
        "002: inline",
    ),
    (
        "<think>Then the sum of both angles is ninety degrees, a même the third one is ninety.</think>",
        "en",
        0.8,
        0.95,
        "006: one French word (même) among 14 English",
    ),
    (
        "<think>The sum of both angles is ninety degrees, так что the third angle is ninety as well.</think>",
        "en",
        0.8,
        0.95,
        "006: two Russian words among 15 English",
    ),
    (
        "<think>So the remaining angle 각도 must be ninety degrees because the total is one hundred eighty.</think>",
        "en",
        0.85,
        0.99,
        "006: one Korean word among 14 English",
    ),
    (
        "<think>两个角的和是九十度，so第三个角也是九十度。</think>",
        "zh",
        0.85,
        0.99,
        "006 reversed: one English word in Chinese",
    ),
]


@pytest.mark.parametrize(("text", "target", "low", "high", "reason"), KIND_VARIANTS, ids=[v[4] for v in KIND_VARIANTS])
def test_kind_variants(text: str, target: str, low: float, high: float, reason: str) -> None:
    result = score_language(text, PARAMS, target=target)
    assert result.status == "ok" and result.score is not None
    assert low <= result.score <= high, result.info


@pytest.mark.parametrize(
    "text",
    ["<think>No, 3.</think> 3", "<think>OK.</think>", "<think>Sure thing, 12.</think>", "<think>Bien, donc 4.</think>"],
)
def test_short_text_abstains(text: str) -> None:
    """Kind of language-004/008: a few words are too few to judge; the check abstains, never flags."""
    result = score_language(text, PARAMS, target="en")
    assert result.score is None and result.status == "too_short"
    assert result.info["words"] < PARAMS.min_words


def _multilingual() -> list[dict]:
    return [json.loads(line) for line in MULTILINGUAL.read_text(encoding="utf-8").splitlines()]


def _in_band(row: dict, score: float | None) -> bool:
    if row.get("abstain"):
        return score is None
    low, high = row["band"]
    return score is not None and low <= score <= high


def test_multilingual_set_is_broad() -> None:
    rows = _multilingual()
    categories = {r["category"] for r in rows}
    assert len(rows) >= 60
    assert {"en", "zh", "ru", "fr", "mix", "code", "math", "short"} <= categories
    assert len({r["id"] for r in rows}) == len(rows)
    assert {r["target"] for r in rows} <= set(SUPPORTED_LANGUAGES)


def test_multilingual_set_every_band(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _multilingual()
    misses = []
    for row in rows:
        result = score_language(row["text"], PARAMS, target=row["target"])
        if not _in_band(row, result.score):
            misses.append((row["id"], row.get("band", "abstain"), result.score, result.info.get("word_counts")))
    with capsys.disabled():
        print(f"\nlingua (restricted, Viterbi): {len(rows) - len(misses)}/{len(rows)} texts in their band")
    assert not misses, misses


def test_only_the_chain_of_thought_counts() -> None:
    text = "<think>We add the two numbers and get twelve, which is the answer.</think>\n答案是十二。这个很简单。"
    result = score_language(text, PARAMS, target="en")
    assert result.score == 1.0 and result.info["word_counts"] == {"en": 12}


def test_prefilled_think_is_read_from_the_start() -> None:
    text = "我们把两个数相加，得到十二。\n</think>\nThe answer is twelve, clearly and simply."
    assert score_language(text, PARAMS, target="zh").score == 1.0


def test_cjk_characters_are_words_and_markup_counts_for_nothing() -> None:
    breakdown = analyze("答案是 x_1 = 42, see src/main.py or https://a.org/b; `foo(bar)` $y^2$ fooBar NASA a I")
    # Words: three Han characters, "see" and "or". The URL, inline code and math are masked away; x_1, 42,
    # src/main.py, fooBar, NASA, "a" and "I" are tokens that count for no language (7); "=" is no token.
    assert [word for word, _ in breakdown.labelled] == ["答", "案", "是", "see", "or"]
    assert [lang for _, lang in breakdown.labelled][:3] == ["zh", "zh", "zh"]
    assert breakdown.ignored == 7


def test_target_from_the_prompt() -> None:
    text = "<think>Сумма углов треугольника равна ста восьмидесяти градусам.</think>"
    result = score_language(
        text, PARAMS, target=None, prompt="Найдите третий угол треугольника, если два угла известны."
    )
    assert result.score == 1.0 and result.info["target"] == "ru" and result.info["target_source"] == "prompt"


@pytest.mark.parametrize("prompt", [None, "", "Solve 2+3."])
def test_no_target(prompt: str | None) -> None:
    result = score_language("<think>We add two and three and get five.</think>", PARAMS, target=None, prompt=prompt)
    assert result.score is None and result.status == "no_target" and result.detail


def test_unsupported_target_is_not_scored() -> None:
    result = score_language("<think>We add two and three to get five.</think>", PARAMS, target="xx")
    assert result.score is None and result.status == "unsupported_language"


def test_min_words_is_a_parameter() -> None:
    text = "<think>Fine, so seven.</think>"
    assert score_language(text, PARAMS, target="en").score is None
    assert score_language(text, LanguageParams(min_words=3), target="en").score == 1.0


def test_breakdown_shares_sum_to_one() -> None:
    result = score_language(
        "<think>So the total is 所以总数是十二 which we divide by three.</think>", PARAMS, target="en"
    )
    assert sum(result.info["languages"].values()) == pytest.approx(1.0)
    assert result.info["word_counts"] == {"en": 9, "zh": 7}
    assert result.score == pytest.approx(9 / 16)


def test_detected_languages_are_supported() -> None:
    assert set(DETECTED_LANGUAGES) <= set(SUPPORTED_LANGUAGES)


_FRESH_PROCESS = """
import json, sys
import reward_server.verifiers.language as language
built_at_import = language._default is not None
from reward_server.schemas.language import LanguageParams
texts = json.loads(sys.stdin.read())
out = [language.score_language(t, LanguageParams(min_words=m), target="en").score for t, m in texts]
print(json.dumps({"built_at_import": built_at_import, "scores": out}))
"""

# Short, ambiguous texts (a langdetect-style detector flips on these); min_words 1 forces a score.
_AMBIGUOUS = [
    ("<think>Fine, so seven.</think>\n<answer>7</answer>", 5),  # cases language-008: abstains
    ("<think>Fine, so seven.</think>", 1),
    ("<think>Okay, a pie, so sum it.</think>", 1),
    ("<think>Die, on, a la, is.</think>", 1),
]


@pytest.mark.slow
def test_deterministic_across_fresh_processes() -> None:
    """Cases language-008: 20 fresh interpreters (each with its own hash seed) give identical scores."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PYTHONHASHSEED", None)

    def run(_: int) -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", _FRESH_PROCESS],
            input=json.dumps(_AMBIGUOUS),
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        return json.loads(proc.stdout)

    # Two at a time: each process loads the detector (about 350 MB).
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(run, range(20)))
    assert not any(r["built_at_import"] for r in runs), "the detector must not be built at import"
    scores = [r["scores"] for r in runs]
    assert all(s == scores[0] for s in scores), scores
    assert scores[0][0] is None  # the case itself abstains
    assert all(s is not None for s in scores[0][1:])
