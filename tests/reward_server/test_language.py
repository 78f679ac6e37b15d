"""The language-consistency verifier: the shared cases, their kinds, the multilingual set, determinism."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from reward_server.schemas.language import SUPPORTED_LANGUAGES, LanguageParams
from reward_server.verifiers.language import (
    DETECTED_LANGUAGES,
    SAMPLE_WINDOWS,
    LinguaDetector,
    _windows,
    analyze,
    score_language,
)
from tests.conftest import CHILD_PYTHONPATH, cases_dir, cases_or_placeholder, data_dir, require_file

PARAMS = LanguageParams()
MULTILINGUAL = Path(__file__).parent / "data" / "multilingual.jsonl"


def _consistent(score: float | None) -> bool:
    """The cases' "consistent": not flagged, i.e. abstained or (almost) all words in the target."""
    return score is None or score > 0.99


def _cases() -> list[dict]:
    path = cases_dir() / "language.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("case", cases_or_placeholder(_cases(), "language.jsonl"), ids=lambda c: c["id"])
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


# Issue 15: a short chain of thought written in a script the target is not written in is decided by the
# script (abstaining would count it as consistent). Each row: text, target, expected score, reason.
SHORT_OTHER_SCRIPT = [
    ("<think>Сложим числа.</think> 9", "en", 0.0, "two Cyrillic words for English"),
    ("<think>先加起来</think> 9", "en", 0.0, "four Han characters for English"),
    ("<think>まず足す</think> 9", "en", 0.0, "kana for English"),
    ("<think>더하면 된다</think> 9", "en", 0.0, "two Hangul words for English"),
    ("<think>Okay 相加</think> 9", "en", 1 / 3, "one English word and two Han characters"),
    ("<think>Add them up.</think> 9", "ru", 0.0, "English for a Russian target"),
]


@pytest.mark.parametrize(
    ("text", "target", "expected", "reason"), SHORT_OTHER_SCRIPT, ids=[r[3] for r in SHORT_OTHER_SCRIPT]
)
def test_short_text_in_another_script_is_decisive(text: str, target: str, expected: float, reason: str) -> None:
    result = score_language(text, PARAMS, target=target)
    assert result.info["words"] < PARAMS.min_words
    assert result.status == "ok" and result.score == pytest.approx(expected), result.info


def test_one_foreign_character_still_abstains() -> None:
    """One word of another script is too little to decide on: the check abstains as before."""
    result = score_language("<think>好</think> 9", PARAMS, target="en")
    assert result.score is None and result.status == "too_short"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>It is so.</think>", 1.0),  # three common English words (lingua alone labels them French)
        ("<think>Yes, we can.</think>", 1.0),
        ("<think>And so it is.</think>", 1.0),
        ("<think>Es ist gut so.</think>", 0.25),  # German but for "so": content words keep the detector's label
    ],
)
def test_short_text_trusts_the_targets_function_words(text: str, expected: float) -> None:
    """Under SHORT_TEXT_WORDS words, the target's function words are the target's (min_words lowered to 3)."""
    result = score_language(text, LanguageParams(min_words=3), target="en")
    assert result.score == pytest.approx(expected), result.info


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


@pytest.mark.parametrize("prompt", [None, "", "Solve 2+3.", "Simplify $\\sqrt{242}$."])
def test_no_target_without_a_default(prompt: str | None) -> None:
    params = LanguageParams(default_target=None)
    result = score_language("<think>We add two and three and get five.</think>", params, target=None, prompt=prompt)
    assert result.score is None and result.status == "no_target" and result.detail


@pytest.mark.parametrize("prompt", [None, "", "Solve 2+3.", "Simplify $\\sqrt{242}$.", "Compute $\\dbinom{31}{28}$."])
def test_default_target_when_the_prompt_is_too_short(prompt: str | None) -> None:
    cot = "<think>Nous ajoutons deux et trois, et nous obtenons cinq.</think>"
    result = score_language(cot, PARAMS, target=None, prompt=prompt)
    assert result.status == "ok" and result.score == 0.0
    assert result.info["target"] == "en" and result.info["target_source"] == "default"
    french = score_language(cot, LanguageParams(default_target="fr"), target=None, prompt=prompt)
    assert french.score == 1.0 and french.info["target_source"] == "default"


def test_default_target_yields_to_the_prompt_and_to_a_given_target() -> None:
    cot = "<think>Nous ajoutons deux et trois, et nous obtenons cinq.</think>"
    prompt = "Quelle est la somme de deux et trois, quand on les ajoute ?"
    from_prompt = score_language(cot, PARAMS, target=None, prompt=prompt)
    assert from_prompt.info["target"] == "fr" and from_prompt.info["target_source"] == "prompt"
    given = score_language(cot, PARAMS, target="de", prompt=prompt)
    assert given.info["target"] == "de" and given.info["target_source"] == "given" and given.score == 0.0


@pytest.mark.data
def test_r1_scores_every_math500_prompt() -> None:
    """QA: 49 of MATH-500's 500 prompts are too short to detect a language; they now take the default."""
    rows = [json.loads(line) for line in require_file(data_dir() / "math500.jsonl").read_text().splitlines()]
    sources: Counter[str] = Counter()
    for row in rows:
        result = score_language(f"<think>{row['solution']}</think>", PARAMS, target=None, prompt=row["problem"])
        assert result.status != "no_target", row["problem"]
        assert result.info["target"] == "en", row["problem"]
        sources[result.info["target_source"]] += 1
        if result.info["target_source"] == "default":  # only where the prompt could not decide
            assert analyze(row["problem"]).total < PARAMS.min_words
    assert sources == {"prompt": 451, "default": 49}


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
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}
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


# --- Prose inside math, and Han/kana glued into identifiers (QA's evasions) ----------------------------------

ENGLISH = "So the answer is five apples here. "  # 7 English words
ZH = "我们把数字加起来"  # 8 Han characters, 8 words
DE = "Wir rechnen nun die Summe aus"  # Latin letters: inside math, they count for nothing
JA = "すべての数を足す"  # 6 kana and 2 Han in a sentence with kana: 8 Japanese words

# Each row: chain of thought, expected word counts, reason.
TEXT_IN_MATH = [
    (f"$\\text{{{ZH}}}$ {ENGLISH}", {"en": 7, "zh": 8}, "\\text in inline math is prose"),
    (f"\\[ x = 3 \\quad \\text{{{ZH}}} \\] {ENGLISH}", {"en": 7, "zh": 8}, "\\text in display math"),
    (f"$$ \\textbf{{{ZH}}} + \\mbox{{{ZH}}} $$ {ENGLISH}", {"en": 7, "zh": 16}, "\\textbf and \\mbox"),
    (f"\\( y = \\textrm {{{ZH}}} \\) {ENGLISH}", {"en": 7, "zh": 8}, "a blank before the brace"),
    ("$\\text{we {really} do} + \\frac{a}{b}$ see it here now.", {"en": 7}, "nested braces; math around stays masked"),
    ("$\\text{area} = \\pi r^2$ is what we know about circles.", {"en": 7}, "the math part is still masked"),
    (f"\\begin{{align}} x &= 1 \\text{{ since {ZH}}} \\end{{align}} {ENGLISH}", {"en": 8, "zh": 8}, "in align"),
    (f"\\begin{{pmatrix}} {DE} & {DE} \\end{{pmatrix}} {ENGLISH}", {"en": 7}, "a matrix is math"),
    (f"\\begin{{align*}} {DE} \\end{{align*}} {ENGLISH}", {"en": 7}, "starred environments are math"),
    (f"\\begin{{note}}{ZH}\\end{{note}} {ENGLISH}", {"en": 7, "zh": 8}, "a non-math environment holds prose"),
    (f"$\\operatorname{{{DE}}}$ {ENGLISH}", {"en": 7}, "other commands stay math"),
    # Math is written in Latin and Greek letters; Han, kana, Hangul and runs of Cyrillic or Arabic in it are
    # prose (a chain of thought hidden in "$...$" would otherwise count for nothing).
    (f"${ZH}$ {ENGLISH}", {"en": 7, "zh": 8}, "Han in inline math"),
    (f"\\begin{{pmatrix}} {ZH} & {ZH} \\end{{pmatrix}} {ENGLISH}", {"en": 7, "zh": 16}, "Han in a matrix"),
    (f"$\\operatorname{{{ZH}}}$ {ENGLISH}", {"en": 7, "zh": 8}, "Han in a command's argument"),
    (f"\\[{JA}\\] {ENGLISH}", {"en": 7, "ja": 8}, "kana in display math"),
    (f"$$ 각도는 구십 도입니다 $$ {ENGLISH}", {"en": 7, "ko": 3}, "Hangul in display math"),
    (f"$давайте посчитаем сумму углов$ {ENGLISH}", {"en": 7, "ru": 4}, "Cyrillic words in inline math"),
    (f"$S_{{осн}} \\cdot h$ {ENGLISH}", {"en": 7, "ru": 1}, "a Cyrillic subscript"),
    (f"$x \\cdot к$ {ENGLISH}", {"en": 7}, "a one-letter Cyrillic variable is a variable"),
    (f"$\\alpha\\beta + αβγ + abc$ {ENGLISH}", {"en": 7}, "Latin and Greek letters are math"),
]


@pytest.mark.parametrize(("cot", "counts", "reason"), TEXT_IN_MATH, ids=[r[2] for r in TEXT_IN_MATH])
def test_text_inside_math_counts(cot: str, counts: dict[str, int], reason: str) -> None:
    assert score_language(f"<think>\n{cot}\n</think>", PARAMS, target="en").info["word_counts"] == counts


def test_prose_environment_in_another_language_lowers_the_score() -> None:
    cot = "\\begin{proof}Donc la réponse est trois, comme prévu.\\end{proof} So we have found the value."
    result = score_language(f"<think>{cot}</think>", PARAMS, target="en")
    assert result.score is not None and result.score < 0.6 and result.info["word_counts"]["fr"] >= 5


# Each row: chain of thought, expected word counts, reason.
GLUED_CJK = [
    (ENGLISH + "_".join(ZH), {"en": 7, "zh": 8}, "joined by underscores"),
    (ENGLISH + ".".join(ZH), {"en": 7, "zh": 8}, "joined by dots"),
    (ENGLISH + "1".join(ZH), {"en": 7, "zh": 8}, "joined by digits"),
    (ENGLISH + "/".join(ZH), {"en": 7, "zh": 8}, "a path"),
    (ENGLISH + "x_" + ZH + "_y2", {"en": 7, "zh": 8}, "inside an identifier"),
    (ENGLISH + "http://" + ZH, {"en": 7, "zh": 8}, "inside a URL"),
    (ENGLISH + ZH + "@example.com", {"en": 7, "zh": 8}, "inside an e-mail address"),
    (ENGLISH + "_".join(JA), {"en": 7, "ja": 8}, "kana joined by underscores"),
    (f"if {ZH}:\n    {ZH}\n{ENGLISH}", {"en": 7, "zh": 16}, "an unfenced code line and the line under it"),
    (f"def f():\n    {ZH}\n{ENGLISH}", {"en": 7, "zh": 8}, "the body of an unfenced def"),
    # The definition's own exclusions stay: code in fences or backticks counts for no language.
    (f"```\n{ZH}\n```\n{ENGLISH}", {"en": 7}, "fenced code"),
    (f"`x_{ZH}()` {ENGLISH}", {"en": 7}, "inline code"),
    # Hangul is written with spaces, so glued Hangul is an identifier, as glued Latin is.
    (ENGLISH + "각도_는_구십", {"en": 7}, "glued Hangul"),
    (ENGLISH + "the_answer_is", {"en": 7}, "glued Latin"),
]


@pytest.mark.parametrize(("cot", "counts", "reason"), GLUED_CJK, ids=[r[2] for r in GLUED_CJK])
def test_han_and_kana_are_words_whatever_glues_them(cot: str, counts: dict[str, int], reason: str) -> None:
    assert score_language(f"<think>\n{cot}\n</think>", PARAMS, target="en").info["word_counts"] == counts


# --- Prose that looks like code, sits in a prose fence, or is shouted (held-out probes) -----------------------

# Each row: chain of thought, expected word counts (by hand), reason.
PROSE_NOT_CODE = [
    # Raw math makes a line as dense in symbols as code; its prose words still count (Если, то, значит, ответ,
    # шесть; Тогда, поэтому; "x" and "и" are one letter). Before, every line was dropped and the check
    # abstained (too_short), which the composer counts as consistent: 1.0 for a Russian chain of thought.
    (
        "Если x = 2, то f(x) = 4 + 2 = 6, значит ответ шесть.\nТогда g(x) = f(x)^2 = 36, и поэтому h(3) = 9.",
        {"ru": 7},
        "Russian prose with raw math",
    ),
    ("Si x = 2, alors f(x) = 6.\nDonc g(x) = f(x)^2 = 36, et h(3) = 9.", {"fr": 4}, "French prose with raw math"),
    # Code keeps counting for nothing: marks of code (";" at the end, "+=", a block in braces) or one bare word.
    (
        f"{ENGLISH}\ntotal += nums[i] * weight;\nwhile (left < right) {{ left = left + step; }}\nans = max(ans)",
        {"en": 7},
        "code lines stay code",
    ),
    ("for each pair (a, b) we count the ways to split them\nprint(total, count)", {"en": 10}, "keyword, then prose"),
    # A fence that is never closed, or one labelled as prose, is read like unfenced text.
    (f"{ENGLISH}\n```text\nDonc la réponse est trois.\n```", {"en": 7, "fr": 5}, "a ```text fence"),
    (f"{ENGLISH}\n```\nDonc la réponse est trois.", {"en": 7, "fr": 5}, "an unclosed fence"),
    (f"```python\nreponse = trois + deux\nprint(reponse)\n```\n{ENGLISH}", {"en": 7}, "a closed code fence"),
    # A line in capitals is shouted prose; capitals among lower-case words are acronyms.
    ("DONC LA RÉPONSE EST TROIS, COMME PRÉVU.", {"fr": 7}, "shouted French"),
    (f"{ENGLISH}We use the GCD and LCM of both numbers.", {"en": 14}, "acronyms in a sentence"),
    # Markup tags are layout (a completion without think tags is read whole).
    (f"<answer> {ENGLISH} </answer> <br/>", {"en": 7}, "markup tags"),
    # A sentence in backticks is prose (five or more words, each Han or kana a word, and no mark of code);
    # code in backticks still counts for nothing.
    (f"{ENGLISH}`Donc la réponse est trois, comme prévu.`", {"en": 7, "fr": 7}, "a French sentence in backticks"),
    (f"`{ZH}` {ENGLISH}", {"en": 7, "zh": 8}, "a Chinese sentence in backticks"),
    (f"``{ZH}`` {ENGLISH}", {"en": 7, "zh": 8}, "in double backticks"),
    (f"`git commit --amend` {ENGLISH}", {"en": 7}, "a command in backticks"),
    (f"`reponse = trois + deux` {ENGLISH}", {"en": 7}, "an assignment in backticks"),
    (f"`sorted(les nombres premiers ici)` {ENGLISH}", {"en": 7}, "a call in backticks"),
    (f"`os.path.join les nombres premiers ici` {ENGLISH}", {"en": 7}, "a dotted name in backticks"),
]


@pytest.mark.parametrize(("cot", "counts", "reason"), PROSE_NOT_CODE, ids=[r[2] for r in PROSE_NOT_CODE])
def test_prose_that_looks_like_code_counts(cot: str, counts: dict[str, int], reason: str) -> None:
    assert score_language(f"<think>\n{cot}\n</think>", PARAMS, target="en").info["word_counts"] == counts


def test_foreign_chain_of_thought_cannot_hide_in_math_lines_or_capitals() -> None:
    """The whole kind: a chain of thought in the wrong language scores 0, never abstains (counted as 1.0)."""
    for cot in (
        "Если x = 2, то f(x) = 4 + 2 = 6.\nТогда g(x) = f(x)^2 = 36, значит h(3) = 9.\nИтак S = a + b = 7, ответ семь.",
        "СНАЧАЛА НАЙДЁМ СУММУ ДВУХ УГЛОВ, ОНА РАВНА ДЕВЯНОСТА ГРАДУСАМ.",
        "```\nСначала найдём сумму двух углов, она равна девяноста градусам.",
    ):
        result = score_language(f"<think>{cot}</think> 90", PARAMS, target="en")
        assert (result.status, result.score) == ("ok", 0.0), (cot, result)


# --- Invisible characters, compatibility forms and homoglyphs (held-out probes) ----------------------------

_DE_WORDS = ("Wir", "berechnen", "jetzt", "die", "Summe", "der", "beiden", "Winkel", "und", "prüfen", "das", "Ergebnis")


@pytest.mark.parametrize(
    ("cot", "counts"),
    [
        # Zero-width characters between letters split a word into one-letter pieces that carry no language:
        # the German chain of thought vanished (too_short, counted as consistent by the composer).
        (" ".join("\u200b".join(w) for w in _DE_WORDS), {"de": 12}),
        (" ".join("\u200d".join(w) for w in _DE_WORDS), {"de": 12}),
        (" ".join("\u00ad".join(w) for w in _DE_WORDS), {"de": 12}),  # soft hyphens
        (" ".join("\u2060".join(w) for w in _DE_WORDS), {"de": 12}),  # word joiners
        (" ".join("\ufeff".join(w) for w in _DE_WORDS), {"de": 12}),  # BOMs
        # Full-width and mathematical letters are the letters they stand for (NFKC).
        ("ｌｅｔ ｍｅ ｃｏｍｐｕｔｅ ｔｈｅ ｓｕｍ ｏｆ ｔｈｅ ｔｗｏ ａｎｇｌｅｓ ｃａｒｅｆｕｌｌｙ", {"en": 10}),
        ("𝐖𝐢𝐫 𝐛𝐞𝐫𝐞𝐜𝐡𝐧𝐞𝐧 𝐣𝐞𝐭𝐳𝐭 𝐝𝐢𝐞 𝐒𝐮𝐦𝐦𝐞 𝐝𝐞𝐫 𝐛𝐞𝐢𝐝𝐞𝐧 𝐖𝐢𝐧𝐤𝐞𝐥", {"de": 8}),
    ],
)
def test_invisible_characters_and_compatibility_forms_hide_nothing(cot: str, counts: dict[str, int]) -> None:
    result = score_language(f"<think>{cot}</think>", PARAMS, target="en")
    assert result.info["word_counts"] == counts


def test_nfd_accents_read_as_nfc() -> None:
    nfc = "Nous calculons d'abord la somme des deux angles, puis nous vérifions le résultat très soigneusement."
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    a, b = (score_language(f"<think>{t}</think>", PARAMS, target="fr") for t in (nfc, nfd))
    assert a.info["word_counts"] == b.info["word_counts"] == {"fr": 15} and a.score == b.score == 1.0


def test_homoglyph_words_count_against_every_target() -> None:
    """English words with Cyrillic "е"/"о" in them are neither English nor Russian: ``other``."""
    # 15 words; 9 of them hold a Cyrillic letter ("Lеt", "mе", "cоmputе", "thе" x2, "оf", "twо", "anglеs",
    # "carеfully"); "mе" and "оf" have under 3 letters and count for nothing.
    homoglyphs = "Lеt mе cоmputе thе sum оf thе twо anglеs carеfully and check the result again"
    for target in ("en", "ru"):
        result = score_language(f"<think>{homoglyphs}</think>", PARAMS, target=target)
        assert result.info["word_counts"] == {"other": 7, "en": 6}, result.info
    assert score_language(f"<think>{homoglyphs}</think>", PARAMS, target="ru").score == 0.0
    # A Greek letter inside a German word used to split it into one-letter pieces that carry no language.
    greek = " ".join(w[0] + "ι" + w[1:] for w in _DE_WORDS)
    assert score_language(f"<think>{greek}</think>", PARAMS, target="en").info["word_counts"] == {"other": 12}
    # Not homoglyphs: a hyphen between scripts, a Greek-letter unit, Korean particles on Latin words.
    legit = "The α-particle moved 5 μm, so the β-decay is slow here. API를 호출합니다 Python을 씁니다"
    counts = score_language(f"<think>{legit}</think>", PARAMS, target="en").info["word_counts"]
    assert "other" not in counts, counts


def test_korean_hanja_is_korean() -> None:
    """Han in a token with Hangul is Hanja ("三角形의"), not Chinese; a Chinese sentence is still Chinese."""
    text = "먼저 三角形의 內角의 합은 180도이므로 나머지 각을 계산합니다."
    result = score_language(f"<think>{text}</think>", PARAMS, target="ko")
    assert result.info["word_counts"] == {"ko": 10} and result.score == 1.0
    mixed = "먼저 각을 계산합니다. 我们把数字加起来。 나머지 각을 계산합니다."
    assert score_language(f"<think>{mixed}</think>", PARAMS, target="ko").info["word_counts"] == {"ko": 6, "zh": 8}


def test_foreign_chain_of_thought_cannot_hide_in_math_or_backticks() -> None:
    """The whole kind: the wrong language in math or backticks scores 0, never abstains (counted as 1.0)."""
    for cot in (
        "$我们先计算两个角的和，然后检查结果。$",
        "\\[давайте посчитаем сумму двух углов и проверим результат\\]",
        "`Wir berechnen jetzt die Summe der beiden Winkel und prüfen das Ergebnis.`",
        "\u200b".join("Wir berechnen jetzt die Summe der beiden Winkel"),
    ):
        result = score_language(f"<think>{cot}</think> 90", PARAMS, target="en")
        assert (result.status, result.score) == ("ok", 0.0), (cot, result)


# --- Bounded work on long chains of thought ---------------------------------------------------------------

_EN = "the sum of these numbers is even, so we keep going. "
_ZH = "所以这个数是偶数，我们继续。"


def test_long_text_is_read_in_evenly_spaced_windows() -> None:
    text = _EN * 3_000  # 156,000 characters
    windows = _windows(text, 20_000)
    assert len(windows) == SAMPLE_WINDOWS and windows[0][0] == 0 and windows[-1][1] == len(text)
    assert all(a < b <= c < d for (a, b), (c, d) in itertools.pairwise(windows))
    assert sum(b - a for a, b in windows) <= 20_000
    # Cut at blanks: no word is split.
    assert all(text[a - 1] == " " for a, _ in windows[1:]) and all(text[b - 1] == " " for _, b in windows[:-1])
    assert _windows("short text", 20_000) == [(0, 10)]


@pytest.mark.parametrize("chinese_share", [0.1, 0.3, 0.5])
def test_sampled_share_estimates_the_whole(chinese_share: float) -> None:
    """A long chain of thought that drifts into Chinese in its last part: the sample sees the drift."""
    n_zh = round(150_000 * chinese_share / len(_ZH))
    n_en = round(150_000 * (1 - chinese_share) / len(_EN))
    text = _EN * n_en + _ZH * n_zh
    sampled = analyze(text, max_chars=20_000)
    whole = analyze(text, max_chars=len(text))
    assert sampled.chars_read <= 20_000 and sampled.chars == whole.chars_read == len(text)
    share = sampled.counts.get("zh", 0) / sampled.total
    exact = whole.counts["zh"] / whole.total
    assert abs(share - exact) < 0.1, (share, exact)


class _RecordingLingua:
    """Stands in for lingua's detector: records each call's size; every word is 70% English, 30% French."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def compute_language_confidence_values_in_parallel(self, words: list[str]) -> list[list[SimpleNamespace]]:
        self.calls.append(len(words))

        def value(code: str, p: float) -> SimpleNamespace:
            return SimpleNamespace(language=SimpleNamespace(iso_code_639_1=SimpleNamespace(name=code.upper())), value=p)

        return [[value("en", 0.7), value("fr", 0.3)] for _ in words]


def test_detector_is_called_in_chunks_so_other_threads_get_the_gil() -> None:
    """lingua holds the GIL for a whole call: 4,000 unseen words stalled the server's event loop 0.5 s."""
    detector = LinguaDetector(languages=("en", "fr"))
    detector._detector = lingua = _RecordingLingua()
    words = [f"word{'x' * (i % 7)}{i}" for i in range(1_000)]
    assert detector.probabilities(words) == [(0.7, 0.3)] * 1_000
    assert lingua.calls == [256, 256, 256, 232]
    assert detector.probabilities(words[:10]) == [(0.7, 0.3)] * 10 and len(lingua.calls) == 4  # cached


def test_max_chars_is_bounded() -> None:
    assert LanguageParams().max_chars == 20_000 and LanguageParams(max_chars=32_000).max_chars == 32_000
    with pytest.raises(ValidationError, match="less than or equal to 32000"):
        LanguageParams(max_chars=100_000)


_ADVERSARIAL = """
import json, sys, time
from reward_server.schemas.format import FormatParams
from reward_server.schemas.language import LanguageParams
from reward_server.verifiers.format import score_format
from reward_server.verifiers.language import score_language

class EveryWordEnglish:
    languages = ("en", "fr")
    def probabilities(self, words):
        return [(1.0, 0.0)] * len(words)

n = 199_000
texts = {
    "unclosed \\\\(": "\\\\(" * (n // 2),
    "unclosed \\\\[": "so \\\\[ a " * (n // 9),
    "unclosed $$": "so $$ a + b " * (n // 12),
    "unclosed \\\\begin": "\\\\begin{align} a " * (n // 16),
    "\\\\begin{ no brace": "\\\\begin{" * (n // 7),
    "math full of \\\\text{": "$" + "\\\\text{" * (n // 6) + "$",
    "dots (URL scan)": "a." * (n // 2),
    "plus (URL scan)": "a+" * (n // 2),
    "e-mail without domain": "a.b@" * (n // 4),
    "backtick widths": "".join("`" * k + " " for k in range(1, 400)) + "` " * 50_000,
    "backtick lines": "`\\n" * (n // 2),
    "< and blanks": "<" + " " * n,
    "end-of-turn tokens": "<think>a</think>42" + "<|im_end|>" * (n // 10),
    "zero-width thinking": "<think>" + "\\u200b" * n + "</think>42",
    "words": "word " * (n // 5),
}
params = LanguageParams()
for name, text in texts.items():
    assert len(text) < 200_001, name
    score_format(text, FormatParams(mode="soft"))
    score_language(text, params, target="en", detector=EveryWordEnglish())
print(json.dumps(sorted(texts)))
"""


def test_adversarial_inputs_take_linear_time() -> None:
    """QA: unclosed LaTeX made the language check quadratic ("\\\\(" * 99,500 took 57 s); "<" and blanks did
    the same to the tag scan. Fifteen 200,000-character attacks on both verifiers must finish in a minute
    in a fresh process: linear code takes about a second, the quadratic one took minutes for each."""
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}
    proc = subprocess.run([sys.executable, "-c", _ADVERSARIAL], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 15
