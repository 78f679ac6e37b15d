"""Language detectors compared on the multilingual test set (tests/reward_server/data/multilingual.jsonl).

Each row of that set is a completion, a target language and the band its language-consistency score must
fall in (or "abstain"). A detector is "accurate" on a row when the score lands in the band. Compared:

- ``lingua+viterbi`` (what the server uses): lingua-language-detector, high-accuracy mode, restricted to
  the 17 detected languages, giving word probabilities that the Viterbi pass smooths.
- ``lingua-low+viterbi``: the same pipeline with lingua's low-accuracy (trigram-only) models.
- ``py3langid+viterbi``: the same pipeline with py3langid (naive Bayes over byte n-grams), restricted to the
  same languages, normalised probabilities.
- ``lingua-whole`` and ``py3langid-whole``: what most peers do, one label for the whole chain of thought
  (score 1 when it is the target, else 0; no masking, no abstaining).

Speed is the mean time to score one row once the models are loaded (a second pass, with lingua's word
cache emptied), as a ratio to ``lingua+viterbi`` measured in the same run; "load s" is what the first pass
took beyond that.

Run: ``python benchmarks/language_detectors.py`` (needs the dev extra for py3langid).

``--long`` instead times the language and format checks on 200,000-character completions (the server's
``max_response_chars``): long prose, and the inputs that were quadratic (unclosed ``\\(``, ``\\[``,
``$$``, ``\\begin{…}``, runs that the URL pattern rescanned, ``<`` and blanks, backticks, end-of-turn
tokens), each with an empty word cache (best of three), as a ratio to one 20,000-character chain of
thought (the default ``max_chars``) measured in the same run.
"""

from __future__ import annotations

import json
import math
import random
import string
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reward_server.schemas.language import LanguageParams  # noqa: E402
from reward_server.verifiers.language import DETECTED_LANGUAGES, LinguaDetector, score_language  # noqa: E402
from reward_server.verifiers.markup import chain_of_thought  # noqa: E402

DATA = ROOT / "tests" / "reward_server" / "data" / "multilingual.jsonl"
PARAMS = LanguageParams()


class Py3LangidDetector:
    """py3langid as a word detector, restricted to :data:`DETECTED_LANGUAGES`."""

    def __init__(self, languages: Sequence[str] = DETECTED_LANGUAGES) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self.languages = tuple(languages)
        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self._identifier.set_languages(list(self.languages))

    def probabilities(self, words: Sequence[str]) -> list[tuple[float, ...]]:
        out = []
        for word in words:
            ranked = dict(self._identifier.rank(word.lower()))
            out.append(tuple(float(ranked.get(code, 0.0)) for code in self.languages))
        return out

    def label(self, text: str) -> str:
        return str(self._identifier.classify(text)[0])


def _lingua_whole() -> Callable[[str], str | None]:
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    langs = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in DETECTED_LANGUAGES]
    extra = [Language.CHINESE, Language.JAPANESE, Language.KOREAN, Language.GREEK, Language.HEBREW]
    detector = LanguageDetectorBuilder.from_languages(*langs, *extra, Language.HINDI, Language.THAI).build()

    def label(text: str) -> str | None:
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found is not None else None

    return label


def _whole_scorer(label: Callable[[str], str | None]) -> Callable[[dict], float | None]:
    def score(row: dict) -> float | None:
        return 1.0 if label(chain_of_thought(row["text"])) == row["target"] else 0.0

    return score


def _pipeline_scorer(detector: object) -> tuple[Callable[[dict], float | None], object]:
    def score(row: dict) -> float | None:
        return score_language(row["text"], PARAMS, target=row["target"], detector=detector).score  # type: ignore[arg-type]

    return score, detector


def _in_band(row: dict, score: float | None) -> bool:
    if row.get("abstain"):
        return score is None
    low, high = row["band"]
    return score is not None and low <= score <= high


def main() -> None:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    candidates: list[tuple[str, Callable[[], tuple[Callable[[dict], float | None], object]]]] = [
        ("lingua+viterbi", lambda: _pipeline_scorer(LinguaDetector())),
        ("lingua-low+viterbi", lambda: _pipeline_scorer(LinguaDetector(low_accuracy=True))),
        ("py3langid+viterbi", lambda: _pipeline_scorer(Py3LangidDetector())),
        ("lingua-whole", lambda: (_whole_scorer(_lingua_whole()), None)),
        ("py3langid-whole", lambda: (_whole_scorer(Py3LangidDetector().label), None)),
    ]
    results = []
    for name, build in candidates:
        start = time.perf_counter()
        scorer, detector = build()
        scores = [scorer(row) for row in rows]  # the first pass loads the models
        load_s = time.perf_counter() - start
        if isinstance(detector, LinguaDetector):
            detector.clear_cache()  # time words the detector has not seen, as in a fresh run
        start = time.perf_counter()
        scores = [scorer(row) for row in rows]
        per_row_ms = (time.perf_counter() - start) / len(rows) * 1000
        load_s -= per_row_ms * len(rows) / 1000
        hits = [_in_band(row, s) for row, s in zip(rows, scores, strict=True)]
        by_category: dict[str, list[bool]] = {}
        for row, hit in zip(rows, hits, strict=True):
            by_category.setdefault(row["category"], []).append(hit)
        misses = [row["id"] for row, hit in zip(rows, hits, strict=True) if not hit]
        results.append((name, sum(hits), load_s, per_row_ms, by_category, misses))

    base_ms = results[0][3]
    print(f"{len(rows)} texts from {DATA.relative_to(ROOT)}; accuracy = score inside its band\n")
    print(f"{'detector':<20} {'accuracy':>10} {'load s':>8} {'ms/text':>8} {'time vs lingua+viterbi':>24}")
    for name, n_hits, load_s, per_row_ms, _, _ in results:
        ratio = per_row_ms / base_ms if base_ms > 0 else math.nan
        print(f"{name:<20} {n_hits:>4}/{len(rows):<5} {load_s:>8.2f} {per_row_ms:>8.2f} {ratio:>23.2f}x")
    print("\naccuracy per category:")
    categories = sorted(results[0][4])
    print(f"{'detector':<20} " + " ".join(f"{c:>6}" for c in categories))
    for name, _, _, _, by_category, _ in results:
        print(f"{name:<20} " + " ".join(f"{sum(by_category[c]):>3}/{len(by_category[c]):<2}" for c in categories))
    # A long chain of thought: every English, French and mixed row's thinking, repeated to ~3,000 words.
    long_text = "\n".join(chain_of_thought(r["text"]) for r in rows if r["category"] in ("en", "fr", "mix")) * 5
    detector = LinguaDetector()
    detector.load()
    for label in ("cold word cache", "warm word cache"):
        start = time.perf_counter()
        result = score_language(long_text, PARAMS, target="en", detector=detector)
        elapsed_ms = (time.perf_counter() - start) * 1000
        print(f"\nlingua+viterbi, one {result.info['words']}-word chain of thought, {label}: {elapsed_ms:.1f} ms")
    print("\nmisses:")
    for name, _, _, _, _, misses in results:
        print(f"  {name}: {', '.join(misses) or '-'}")


def _long_inputs(n: int) -> dict[str, str]:
    rng = random.Random(0)
    unseen = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9))) for _ in range(n))
    return {
        "prose, every word unseen": unseen[:n],
        "prose, one word repeated": "word " * (n // 5),
        "Chinese": "我们首先把所有的数字加起来" * (n // 13),
        "English then Chinese": "We add the numbers and divide. " * (n // 62) + "然后我们再除以总数。" * (n // 20),
        "unclosed \\(": "\\(" * (n // 2),
        "unclosed \\[": "so \\[ a + b " * (n // 12),
        "unclosed $$": "so $$ a + b " * (n // 12),
        "unclosed \\begin{align}": "\\begin{align} a " * (n // 16),
        "a.a.a. (URL rescans)": "a." * (n // 2),
        "< and blanks": "<" + " " * n,
        "backtick lines": "`\n" * (n // 2),
        "end-of-turn tokens": "<think>a</think>42" + "<|im_end|>" * (n // 10),
    }


def long_completions() -> None:
    """Time 200,000-character completions against one 20,000-character chain of thought."""
    from reward_server.schemas.format import FormatParams
    from reward_server.verifiers.format import score_format

    detector = LinguaDetector()
    detector.load()

    def timed(text: str) -> tuple[float, float]:
        detector.clear_cache()
        start = time.perf_counter()
        score_language(text, PARAMS, target="en", detector=detector)
        language_s = time.perf_counter() - start
        start = time.perf_counter()
        score_format(text, FormatParams(mode="soft"))
        return language_s, time.perf_counter() - start

    base_text = "\n".join(chain_of_thought(json.loads(line)["text"]) for line in DATA.read_text().splitlines())
    base_text = (base_text * (PARAMS.max_chars // len(base_text) + 1))[: PARAMS.max_chars]
    base_s = min(timed(base_text)[0] for _ in range(3))
    print(
        f"baseline: language check of one {len(base_text):,}-character chain of thought, cold word cache: "
        f"{base_s * 1000:.0f} ms\n"
    )
    print(f"{'200,000-character completion':<28} {'language ms':>11} {'vs baseline':>11} {'format ms':>10}")
    for name, text in _long_inputs(200_000).items():
        language_s, format_s = (min(column) for column in zip(*(timed(text[:200_000]) for _ in range(3)), strict=True))
        print(f"{name:<28} {language_s * 1000:>11.0f} {language_s / base_s:>10.2f}x {format_s * 1000:>10.1f}")


if __name__ == "__main__":
    long_completions() if "--long" in sys.argv else main()
