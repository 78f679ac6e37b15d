"""The RL example's data and summary (examples/rl_gain): the hard regime's answers, its held-out split, and the
figures ``summary.py`` reads off a run directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.examples import EXAMPLES, load_example
from tests.reward_server.serverproc import free_port

EXAMPLE = EXAMPLES / "rl_gain"
prepare = load_example("rl_gain", "prepare")
summary = load_example("rl_gain", "summary")
new_words = load_example("rl_gain", "new_words")


class _Tied(torch.nn.Module):
    """An embedding table shared by input and output, as in the example's tied Qwen2."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding.from_pretrained(table.clone(), freeze=False)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed

    def get_output_embeddings(self) -> torch.nn.Embedding:
        return self.embed


def test_new_verbs_start_between_the_plus_and_minus_means() -> None:
    table = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 4.0], [9.0, 9.0], [9.0, 9.0]])
    model = _Tied(table)
    new_words.start_new_verbs(model, [0, 1], [2, 3], [4, 5], 0.25)
    # 0.25 * (2, 0) + 0.75 * (0, 3), in both rows; the known verbs are untouched
    assert model.embed.weight[4:].tolist() == [[0.5, 2.25], [0.5, 2.25]]
    assert model.embed.weight[:4].tolist() == table[:4].tolist()
    new_words.start_new_verbs(model, [0, 1], [2, 3], [4, 5], 0.5)
    assert model.embed.weight[4].tolist() == table[:4].mean(0).tolist()  # 0.5: the plain mean of all four


def test_calibration_bisects_to_an_even_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in share that grows with the new row's first coordinate, 0.5 where alpha = 0.7: the bisection
    finds it to 2^-10 and leaves the model at the alpha it reports."""
    table = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    model = _Tied(table)

    def share(m: _Tied, *_: object) -> float:
        return float(torch.sigmoid(40 * (m.embed.weight[2, 0].detach() - 0.7)))

    monkeypatch.setattr(new_words, "plus_share", share)
    alpha, got, trace = new_words.calibrate(model, None, ([0], [1], [2]), ["p"])
    assert abs(alpha - 0.7) < 2**-9 and abs(got - 0.5) < 0.01
    assert [a for a, _ in trace[:3]] == [0.5, 0.75, 0.625]  # below 0.5 at 0.5: up; above at 0.75: down
    assert model.embed.weight[2].tolist() == pytest.approx([alpha, 1 - alpha])


def test_identity_offsets_follow_the_known_rows_and_say_nothing_of_the_operation() -> None:
    """Offsets are combinations of the known rows' deviations (so they lie in their span) with no component along
    mean(+) - mean(-); the same seed gives the same offsets, and with ``spread`` each new row is its mix plus its
    own offset."""
    table = torch.tensor(
        [[2.0, 0.0, 1.0], [4.0, 0.0, -1.0], [0.0, 2.0, 3.0], [0.0, 4.0, -3.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    )
    offsets = new_words.identity_offsets(table, [0, 1], [2, 3], 2, seed=7)
    axis = table[:2].mean(0) - table[2:4].mean(0)  # (3, -3, 0)
    assert (offsets @ axis).abs().max() < 1e-5
    assert offsets.abs().sum() > 0 and not torch.allclose(offsets[0], offsets[1])
    assert torch.equal(offsets, new_words.identity_offsets(table, [0, 1], [2, 3], 2, seed=7))
    model = _Tied(table)
    new_words.start_new_verbs(model, [0, 1], [2, 3], [4, 5], [0.25, 0.75], spread=2.0, seed=7)
    mixes = torch.stack(
        [0.25 * table[:2].mean(0) + 0.75 * table[2:4].mean(0), 0.75 * table[:2].mean(0) + 0.25 * table[2:4].mean(0)]
    )
    assert torch.allclose(model.embed.weight[4:], mixes + 2.0 * offsets)


def test_lean_targets_split_the_verbs_by_seed_alone() -> None:
    targets = new_words.lean_targets(8, 0.25, seed=1)
    assert sorted(targets) == [0.25] * 4 + [0.75] * 4
    assert targets == new_words.lean_targets(8, 0.25, seed=1)
    assert len({tuple(new_words.lean_targets(8, 0.25, seed=s)) for s in range(10)}) > 1
    assert new_words.lean_targets(3, 0.0, seed=1) == [0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match="lean must be in"):
        new_words.lean_targets(8, 0.5, seed=1)


def test_per_verb_calibration_bisects_each_verb_to_its_own_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in sampler: each prompt's operation is + with a probability that grows with its verb's row's first
    coordinate (0.5 at 0.7 for verb 0, at 0.4 for verb 1), drawn deterministically as a share of 64 samples. Each
    verb's alpha is bisected on its own prompts to its own target."""
    table = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    model = _Tied(table)
    centre = [0.7, 0.4]

    def ops(m: _Tied, _tok: object, prompts: list[str], samples: int, _seed: int) -> list[str]:
        out = []
        for i in range(len(prompts)):
            v = i % 2
            p = float(torch.sigmoid(40 * (m.embed.weight[2 + v, 0].detach() - centre[v])))
            plus = round(p * samples)
            out += ["+"] * plus + ["-"] * (samples - plus)
        return out

    monkeypatch.setattr(new_words, "first_operations", ops)
    alphas, shares = new_words.calibrate_per_verb(
        model, None, ([0], [1], [2, 3]), ["p"] * 4, [0, 1, 0, 1], spread=0.0, targets=[0.5, 0.5], samples=64
    )
    assert abs(alphas[0] - 0.7) < 0.01 and abs(alphas[1] - 0.4) < 0.01
    assert all(abs(s - 0.5) < 0.05 for s in shares)
    with pytest.raises(ValueError, match=r"no calibration prompt uses new verb\(s\) \[1\]"):
        new_words.calibrate_per_verb(model, None, ([0], [1], [2, 3]), ["p"], [0], spread=0.0)


def test_answers_follow_the_verb_and_the_split_is_disjoint() -> None:
    train, test = prepare.problems(prepare.HARD_VERBS, seed=1, n_test=200)
    # every pair a >= b of two-digit numbers (4,095 of them) with each of the eight new verbs
    assert len(train) + len(test) == 8 * sum(a - 9 for a in range(10, 100)) == 32760
    assert len(test) == 200
    for row in train + test:
        m = re.fullmatch(r"(\w+) has (\d+) (\w+)\. \1 (.+) (\d+) \3\. How many \3 does \1 have now\?\n", row["prompt"])
        assert m, row["prompt"]
        a, verb, b = int(m.group(2)), m.group(4), int(m.group(5))
        assert verb == row["type"]
        assert row["ground_truth"] == str({"+": a + b, "-": a - b}[prepare.HARD_VERBS[verb]]), row
    assert not {r["key"] for r in train} & {r["key"] for r in test}
    counts = {verb: sum(r["type"] == verb for r in test) for verb in prepare.HARD_VERBS}
    assert min(counts.values()) >= 10, counts  # every new verb is in the held-out set


def test_worked_solutions_only_for_the_easy_verbs() -> None:
    """No verb is in both regimes, and the worked solution's answer is the ground truth."""
    assert not set(prepare.EASY_VERBS) & set(prepare.HARD_VERBS)
    assert sorted(prepare.EASY_VERBS.values()) == sorted(prepare.HARD_VERBS.values()) == ["+"] * 4 + ["-"] * 4
    easy, _ = prepare.problems(prepare.EASY_VERBS, seed=0, n_test=200)
    row = next(r for r in easy if r["key"] == "sells:83,47")
    assert row["completion"] == ("<think>13 - 7 = 6, borrow 1.\n8 - 1 = 7.\n7 - 4 = 3.</think>\n<answer>36</answer>")
    assert row["ground_truth"] == "36"
    assert all(r["completion"].endswith(f"<answer>{r['ground_truth']}</answer>") for r in easy)


def _write_eval(run: Path, arm: str, pass1: float, t1: tuple[float, float] | None = None) -> None:
    (run / "eval" / arm).mkdir(parents=True)
    (run / "eval" / arm / "summary.json").write_text(json.dumps({"pass@1": pass1}))
    if t1 is not None:
        (run / "eval" / f"{arm}_t1").mkdir(parents=True)
        (run / "eval" / f"{arm}_t1" / "summary.json").write_text(json.dumps({"pass@1": t1[0], "pass@8": t1[1]}))


def test_summary_of_one_run_has_the_fixed_keys(tmp_path: Path) -> None:
    run = tmp_path / "seed0"
    _write_eval(run, "start", 0.2, (0.25, 0.75))
    _write_eval(run, "grpo", 0.7, (0.6, 0.8))
    _write_eval(run, "random_reward", 0.19)
    (run / "data").mkdir()
    (run / "data" / "test.jsonl").write_text(
        json.dumps({"prompt": "p1", "type": "drops"}) + "\n" + json.dumps({"prompt": "p2", "type": "earns"}) + "\n"
    )
    (run / "eval" / "grpo" / "samples.jsonl").write_text(
        json.dumps({"source_index": 0, "reward": 1.0, "reward_components": {"accuracy": {"score": 1.0}}})
        + "\n"
        + json.dumps({"source_index": 1, "reward": 0.0, "reward_components": {"accuracy": {"score": 0.0}}})
        + "\n"
    )
    (run / "times.jsonl").write_text('{"phase": "sft", "seconds": 500}\n{"phase": "grpo", "seconds": 300}\n')
    summary.main([str(run)])
    out = json.loads((run / "summary.json").read_text())
    assert out["start"] == {"pass1": 0.2, "pass1_t1": 0.25, "pass8_t1": 0.75, "easy_pass1": None, "pass1_by_type": {}}
    assert out["grpo"]["pass1"] == 0.7 and out["grpo"]["pass1_by_type"] == {"drops": 1.0, "earns": 0.0}
    assert out["random_reward"]["pass1"] == 0.19 and out["random_reward"]["pass8_t1"] is None
    assert out["seconds"]["total"] == 800
    table = (run / "summary.md").read_text()
    assert "| GRPO, outcome supervision | 70.0% | 60.0% | 80.0% | - | +50.0 |" in table


def test_summary_over_runs_gives_mean_and_range(tmp_path: Path) -> None:
    for seed, (start, grpo) in enumerate([(0.1, 0.5), (0.2, 0.8), (0.3, 0.65)]):
        _write_eval(tmp_path / f"seed{seed}", "start", start)
        _write_eval(tmp_path / f"seed{seed}", "grpo", grpo)
    summary.main([str(tmp_path / f"seed{s}") for s in range(3)])
    out = json.loads((tmp_path / "summary.json").read_text())
    assert out["mean"]["grpo"]["pass1"] == pytest.approx((0.5 + 0.8 + 0.65) / 3)
    assert out["mean"]["start"]["pass1"] == pytest.approx(0.2)
    table = (tmp_path / "summary.md").read_text()
    assert "| GRPO, outcome supervision | 65.0% [50.0, 80.0] | - | - | - | +40.0, +60.0, +35.0 |" in table


def test_summary_shows_the_larger_held_out_set_where_a_run_has_it(tmp_path: Path) -> None:
    """Two seeds, one evaluated on the larger held-out set too (``eval/<arm>_more``): the column and its gains
    appear, over the runs that have it, and the run without it keeps its other figures."""
    for seed, (start, control) in enumerate([(0.2, 0.15), (0.4, 0.42)]):
        _write_eval(tmp_path / f"seed{seed}", "start", start)
        _write_eval(tmp_path / f"seed{seed}", "random_reward", control)
    for arm, value, prompts in (("start", 0.182, 1000), ("random_reward", 0.112, 1000)):
        (tmp_path / "seed0" / "eval" / f"{arm}_more").mkdir()
        (tmp_path / "seed0" / "eval" / f"{arm}_more" / "summary.json").write_text(
            json.dumps({"pass@1": value, "pass@1_prompts": prompts})
        )
    summary.main([str(tmp_path / "seed0"), str(tmp_path / "seed1")])
    out = json.loads((tmp_path / "summary.json").read_text())
    seed0 = out["runs"][str(tmp_path / "seed0")]
    assert seed0["random_reward"]["pass1_more"] == 0.112 and seed0["random_reward"]["more_prompts"] == 1000
    assert "pass1_more" not in out["runs"][str(tmp_path / "seed1")]["random_reward"]
    assert out["mean"]["random_reward"]["pass1_more"] == pytest.approx(0.112)
    table = (tmp_path / "summary.md").read_text()
    assert "| greedy pass@1, larger held-out set | greedy gain per run (points) | gain on the larger set" in table
    assert "| GRPO with shuffled rewards (control) | 28.5% [15.0, 42.0] | - | - | - | 11.2% | -5.0, +2.0 | -7.0 |" in (
        table
    )


def _short_run(out: Path, **settings: str) -> dict[str, str]:
    """The environment of a shortened ``run.sh`` into ``out``: one RL step of 32 prompts (every new verb is among
    them for seed 0, so the calibration has each), a free port, this interpreter; ``settings`` add or override."""
    return {
        **os.environ,
        "OUT": str(out),
        "PORT": str(free_port()),
        "PYTHON": sys.executable,
        "RL_STEPS": "1",
        "CALIBRATION_PROMPTS": "32",
        "RLVR_PRELOAD_LANGUAGE_MODELS": "false",
        **settings,
    }


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_run_sh_writes_every_arms_figures(tmp_path: Path) -> None:
    """The whole script, shortened (4 cold-start steps, 1 step an arm, 8 held-out problems): every arm runs from
    the start against a live reward server and ``summary.json`` has the fixed keys, each ``pass1`` a share of the
    8 problems."""
    out = tmp_path / "run"
    env = _short_run(out, SFT_STEPS="4", EVAL_PROMPTS="8")
    done = subprocess.run(["bash", str(EXAMPLE / "run.sh")], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "summary.json").read_text())
    for arm in ("start", "grpo", "rft_offline", "rft_online", "random_reward", "process"):
        assert 0.0 <= result[arm]["pass1"] <= 1.0 and (8 * result[arm]["pass1"]).is_integer(), (arm, result[arm])
        assert result[arm]["pass8_t1"] is not None
    rl_prompts = (out / "data" / "rl_prompts.jsonl").read_text().splitlines()
    assert len(rl_prompts) == 32  # 1 step of 32 prompts
    more = (out / "data" / "test_more.jsonl").read_text().splitlines()
    assert len(more) == 1000 and not set(more) & set(rl_prompts)
    assert not {json.loads(r)["prompt"] for r in more} & {
        json.loads(r)["prompt"] for r in (out / "data" / "test.jsonl").read_text().splitlines()
    }
    for arm in ("start", "grpo", "random_reward"):  # the larger set, cut to EVAL_PROMPTS problems like the others
        assert result[arm]["more_prompts"] == 8 and (8 * result[arm]["pass1_more"]).is_integer(), result[arm]
    assert (out / "grpo" / "checkpoint-1").is_dir() and (out / "random_reward" / "checkpoint-1").is_dir()
    for arm in ("grpo", "rft_online", "random_reward", "process"):  # the PPO-ptx anchor on the cold start's rows
        logged = [json.loads(r) for r in (out / arm / "metrics.jsonl").read_text().splitlines()]
        assert [r["loss/ptx"] > 0.0 for r in logged if "reward/mean" in r] == [True], arm


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ARMS": "grpo grop"}, "unknown arm 'grop'"),
        ({"JOBS": "two"}, "JOBS=two: the number of arms"),
        ({"JOBS": "0"}, "JOBS=0: the number of arms"),
        ({"HELDOUT_MORE": "many"}, "HELDOUT_MORE=many: the number of extra held-out problems"),
        ({"RL_SETS": "beta=0.2 betta=0.1"}, "RL_SETS: config error: unknown option 'betta' in --set betta=0.1"),
        ({"RL_SETS": "learning_rate=-1"}, "RL_SETS: config error: learning_rate=-1.0: must be in (0, 1)"),
        ({"RL_SETS": "beta"}, "RL_SETS: config error: --set expects key=value, got 'beta'"),
    ],
)
def test_run_sh_refuses_bad_settings_before_anything_runs(tmp_path: Path, env: dict[str, str], message: str) -> None:
    """A misspelt arm, a bad JOBS or an RL option the trainer refuses stops the script at once (exit 2), before the
    data and the cold start."""
    out = tmp_path / "run"
    done = subprocess.run(
        ["bash", str(EXAMPLE / "run.sh")],
        env={**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not out.exists()


def test_run_sh_refuses_a_larger_held_out_set_than_the_rl_prompts_leave(tmp_path: Path) -> None:
    """HELDOUT_MORE rows must come from train.jsonl's rows past the RL prompts: asking for more stops the script
    (exit 2) after the data are written, before the reward server and the cold start."""
    out = tmp_path / "run"
    env = {**_short_run(out), "RL_STEPS": "1000", "HELDOUT_MORE": "1000"}  # 32,000 RL prompts of 32,560 rows
    done = subprocess.run(["bash", str(EXAMPLE / "run.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "HELDOUT_MORE=1000: with 32000 RL prompts, more than train.jsonl holds" in done.stderr
    assert not (out / "sft").exists() and not (out / "data" / "test_more.jsonl").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_run_sh_names_the_arms_that_failed(tmp_path: Path) -> None:
    """Two arms at a time (``JOBS=2``), both refused by the trainer once it loads (a policy directory that does not
    exist, which the up-front check of RL_SETS cannot see): the script exits 1 naming both, each arm's error is in
    its own log, and no summary is written."""
    out = tmp_path / "run"
    missing = str(tmp_path / "no-such-policy")
    env = _short_run(
        out, SFT_STEPS="2", EVAL_PROMPTS="2", ARMS="grpo rft_online", JOBS="2", RL_SETS=f"model_name_or_path={missing}"
    )
    done = subprocess.run(["bash", str(EXAMPLE / "run.sh")], env=env, capture_output=True, text=True, timeout=800)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "arms failed: grpo rft_online" in done.stderr
    for arm in ("grpo", "rft_online"):
        assert f"model_name_or_path='{missing}': no such directory" in (out / "logs" / f"{arm}.log").read_text()
        assert (out / "logs" / f"{arm}.rc").read_text().strip() != "0"
    assert not (out / "summary.json").exists()


def test_the_operation_split_tells_the_verbs_meaning_from_the_arithmetic(tmp_path: Path) -> None:
    """Four hand-made greedy answers: right operation and sum, right operation and a wrong sum, wrong operation,
    no working: 2 of 4 with the right operation, 1 of those 2 correct."""
    (tmp_path / "data").mkdir()
    (tmp_path / "eval" / "grpo").mkdir(parents=True)
    problems = [("Al has 30 cups. Al earns 12 cups.", "42"), ("Bo has 50 pens. Bo burns 20 pens.", "30")] * 2
    (tmp_path / "data" / "test.jsonl").write_text(
        "".join(json.dumps({"prompt": p, "ground_truth": g, "type": "x"}) + "\n" for p, g in problems)
    )
    answers = [
        ("0 + 2 = 2.\n3 + 1 = 4.", 1.0),  # an earns problem: +, right
        ("0 - 0 = 0.\n5 - 2 = 2.", 0.0),  # a burns problem: -, a wrong digit
        ("0 - 2 = 8.\n3 - 1 = 1.", 0.0),  # an earns problem written as a minus
        ("<answer>30</answer>", 0.0),  # no working
    ]
    (tmp_path / "eval" / "grpo" / "samples.jsonl").write_text(
        "".join(
            json.dumps({"completion": c, "reward": r, "source_index": i}) + "\n" for i, (c, r) in enumerate(answers)
        )
    )
    split = summary._operation_split(summary._greedy_rows(tmp_path, "grpo"))
    assert split == {"operation_right": 0.5, "correct_given_operation": 0.5}
