"""``python -m trainer sample``: pass@k, what is kept and why, and the SFT dataset it writes.

Rewards come from the stand-in server (``conftest.py``); the run against a live server is in
``test_smoke_live.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from reward_server.client import ComponentResult, RewardResult
from trainer.config import ConfigError, SampleConfig, config_from_dict
from trainer.data import read_rows
from trainer.sample import pass_at_k, sample, select
from trainer.stand_in import StandInServer


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (2, 1, 1, 0.5),  # pass@1 is c / n
        (10, 3, 1, 0.3),
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3, 2) / C(4, 2)
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7, 4) / C(10, 4)
        (5, 0, 3, 0.0),
        (5, 5, 5, 1.0),
        (5, 3, 3, 1.0),  # fewer than k wrong ones: every draw of k holds a right one
        (200, 1, 100, 0.5),  # large n: the product form stays exact
    ],
)
def test_pass_at_k_is_chen_et_al_unbiased_estimator(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    if n - c >= k:
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_pass_at_k_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)


def _result(reward: float | None, accuracy: float | None = None) -> RewardResult:
    acc = reward if accuracy is None else accuracy
    return RewardResult(
        id="x",
        reward=reward,
        status="ok" if reward is not None else "timeout",
        components={"accuracy": ComponentResult(score=acc, weight=1.0, status="ok" if acc is not None else "timeout")},
    )


def _cfg(**values: Any) -> SampleConfig:
    return config_from_dict({"model_name_or_path": "m", "data": "d.jsonl", **values}, cls=SampleConfig)


@pytest.mark.parametrize(
    ("config", "texts", "rewards", "truncated", "kept", "dropped"),
    [
        # threshold 1.0 keeps 1.0 and 1.5; a null is never kept
        ({}, ["a", "b", "c", "d"], [1.0, 0.0, None, 1.5], [0, 0, 0, 0], [3, 0], {"below_threshold": 1, "null": 1}),
        # a completion cut off at the length limit is no SFT target unless asked for
        ({}, ["a", "b"], [1.0, 1.0], [1, 0], [1], {"truncated": 1}),
        ({"keep_truncated": True}, ["a", "b"], [1.0, 1.0], [1, 0], [0, 1], {}),
        # equal up to whitespace: one copy; the best-scored copy is the one kept
        ({}, ["x  y", "x y\n", "z"], [1.0, 2.0, 1.0], [0, 0, 0], [1, 2], {"duplicate": 1}),
        ({"deduplicate": False}, ["x y", "x y"], [1.0, 1.0], [0, 0], [0, 1], {}),
        # the cap keeps the highest scored, the earliest sampled first among equals
        ({"max_kept_per_prompt": 2}, ["a", "b", "c", "d"], [1.0, 2.0, 1.0, 1.0], [0] * 4, [1, 0], {"over_cap": 2}),
        ({"reward_threshold": 0.5}, ["a", "b"], [0.4, 0.5], [0, 0], [1], {"below_threshold": 1}),
    ],
)
def test_select(
    config: dict[str, Any],
    texts: list[str],
    rewards: list[float | None],
    truncated: list[int],
    kept: list[int],
    dropped: dict[str, int],
) -> None:
    got, why = select(texts, [_result(r) for r in rewards], [bool(t) for t in truncated], _cfg(**config))
    assert got == kept
    assert dict(why) == dropped


def test_the_threshold_can_look_at_one_component() -> None:
    # reward 1.5 = accuracy 1 + format 0.5; reward 0.5 = a wrong answer in the right format
    results = [_result(1.5, accuracy=1.0), _result(0.5, accuracy=0.0), _result(1.0, accuracy=1.0)]
    got, _ = select(["a", "b", "c"], results, [False] * 3, _cfg(threshold_component="accuracy"))
    assert got == [0, 2]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"pass_at_k": [1, 32], "num_generations": 16}, "every k must be between 1 and num_generations"),
        ({"max_kept_per_prompt": 0}, "must be >= 1 or null"),
        ({"temperature": -1.0}, "must be >= 0"),
        ({"k": 4}, "Did you mean 'num_generations'"),
        ({"reward_server_urls": ["localhost:8000"]}, "http"),
    ],
)
def test_invalid_sample_values_say_how_to_fix_them(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(**values)


def _by_length(item: dict[str, Any]) -> float | None:
    """Deterministic stand-in: null for every fifth item, else 1 when the completion has an even length."""
    if int(item["id"].rsplit("-c", 1)[1]) % 5 == 4:
        return None
    return 1.0 if len(item["response"]) % 2 == 0 else 0.0


def test_sample_keeps_exactly_what_the_server_verified(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(_by_length)
    cfg = _cfg(
        model_name_or_path=str(tiny_model_dir),
        data=str(prompt_files[0]),
        output_dir=str(tmp_path / "out"),
        num_generations=6,
        chunk_prompts=5,
        max_completion_length=6,
        pass_at_k=[1, 3],
        keep_truncated=True,
        save_samples=True,
        progress_bar=False,
    )
    result = sample(cfg, scorer=server.scorer())
    samples = read_rows(str(tmp_path / "out" / "samples.jsonl"), "train")
    kept = read_rows(str(result.kept_path), "train")
    source = read_rows(str(prompt_files[0]), "train")
    assert len(server.items) == len(samples) == 12 * 6  # every prompt, every completion, scored once

    # What was kept is exactly the verified completions, each once per prompt.
    verified = {(s["source_index"], " ".join(s["completion"].split())) for s in samples if s["reward"] == 1.0}
    assert {(k["source_index"], " ".join(k["completion"].split())) for k in kept} == verified
    assert len(kept) == len(verified) >= 10
    for row in kept:
        assert row["reward"] == 1.0 and row["reward_components"]["accuracy"]["score"] == 1.0
        assert row["prompt"] == source[row["source_index"]]["prompt"]
        assert row["ground_truth"] == source[row["source_index"]]["ground_truth"]

    # The figures, recomputed from samples.jsonl.
    by_prompt: dict[int, list[float]] = {}
    for s in samples:
        if s["reward"] is not None:
            by_prompt.setdefault(s["source_index"], []).append(s["reward"])
    pass1 = sum(sum(v) / len(v) for v in by_prompt.values()) / len(by_prompt)
    pass3 = sum(pass_at_k(len(v), int(sum(v)), 3) for v in by_prompt.values()) / len(by_prompt)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["pass@1"] == pytest.approx(pass1)
    assert summary["pass@3"] == pytest.approx(pass3)
    assert summary["num_kept"] == len(kept)
    assert summary["kept_fraction"] == pytest.approx(len(kept) / 72)
    # Item ids count completions within a chunk (5, 5, 2 prompts): c4, c9 ... are null, 6 + 6 + 2 of them.
    assert summary["dropped"]["null"] == sum(s["reward"] is None for s in samples) == 14
    assert summary["num_kept"] + sum(summary["dropped"].values()) == 72
    assert "pass@1:" in result.report() and "kept" in result.report()


def test_the_same_seed_samples_the_same_completions(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    def run(out: str) -> list[str]:
        cfg = _cfg(
            model_name_or_path=str(tiny_model_dir),
            data=str(prompt_files[1]),
            output_dir=str(tmp_path / out),
            num_generations=4,
            max_completion_length=5,
            save_samples=True,
            progress_bar=False,
        )
        sample(cfg, scorer=StandInServer(_by_length).scorer())
        return [r["completion"] for r in read_rows(str(tmp_path / out / "samples.jsonl"), "train")]

    assert run("a") == run("b")
