"""The R1/DeepSeekMath/DAPO options in the GRPO loop: process supervision, dynamic sampling, reference sync, the
completion-length schedule, and the loose ends of the loss (truncated sampling, entropy, clip ratio, lr)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.trainer.test_train import _config, _params
from trainer.config import ConfigError
from trainer.data import indices_from
from trainer.metrics import read_metrics
from trainer.rollout.base import SamplingParams
from trainer.rollout.forward import completion_log_probs
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.stand_in import StandInServer
from trainer.steps import char_end_to_token, step_tensors
from trainer.train import train


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record the arguments and output of every ``grpo_loss`` call of the loop."""
    from trainer import train as train_module

    seen: list[dict[str, Any]] = []
    real = train_module.grpo_loss

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        logp, old_logp, advantages, mask = args[:4]
        seen.append(
            {
                "logp": logp.detach().clone(),
                "old_logp": old_logp.clone(),
                "advantages": advantages.clone(),
                "mask": mask.clone(),
                "out": out,
                **kwargs,
            }
        )
        return out

    monkeypatch.setattr(train_module, "grpo_loss", recording)
    return seen


def _varied(item: dict[str, Any]) -> float:
    return float(len(item["response"]) % 2)


def _whole_and_resumed(
    model_dir: Path, files: tuple[Path, Path], tmp_path: Path, score: Any, **common: Any
) -> tuple[Any, Any, Path]:
    """A 3-step run, and the same run stopped after step 1 (later checkpoints removed) and resumed."""
    whole = train(_config(model_dir, files, tmp_path / "whole", **common), scorer=StandInServer(score).scorer())
    cut = tmp_path / "cut"
    train(_config(model_dir, files, cut, **common, save_steps=1), scorer=StandInServer(score).scorer())
    for later in ("checkpoint-2", "checkpoint-3"):
        shutil.rmtree(cut / later)
    resumed = train(
        _config(model_dir, files, cut, **common, resume_from_checkpoint="latest"), scorer=StandInServer(score).scorer()
    )
    return whole, resumed, cut


# ------------------------------------------------------------------------------------------- process supervision


def test_char_ends_map_to_the_token_that_holds_the_last_character(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tokenizer("What is 12 plus 3? <answer>15</answer>", add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode(ids[: k + 1]) for k in range(len(ids))]
    for k, prefix in enumerate(pieces):
        # The step that ends exactly where token k ends maps to token k; one character further to token k + 1.
        assert char_end_to_token(tokenizer, ids, len(prefix)) == k
        if k + 1 < len(ids):
            assert char_end_to_token(tokenizer, ids, len(prefix) + 1) == k + 1


def test_process_supervision_with_one_step_per_completion_is_outcome_supervision(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stand-in returns the whole completion as one step scored like the outcome; the last scored step is
    # extended to the EOS, so every token's advantage is its completion's outcome advantage.
    seen = _recording(monkeypatch)
    outcome = train(_config(tiny_model_dir, prompt_files, tmp_path / "o", max_steps=1), scorer=StandInServer().scorer())
    server = StandInServer()
    process = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "p", max_steps=1, advantage_estimator="process"),
        scorer=server.scorer(),
    )
    assert server.items[0]["steps"] == {"component": "arithmetic", "separator": "\n\n"}  # asked for, per item
    per_completion, per_token = seen[0], seen[1]
    assert per_completion["advantages"].ndim == 1 and per_token["advantages"].ndim == 2
    mask = per_token["mask"].bool()
    expanded = per_completion["advantages"].unsqueeze(1).expand_as(per_token["advantages"])
    torch.testing.assert_close(per_token["advantages"][mask], expanded[mask])
    for name, value in _params(outcome.checkpoint).items():
        torch.testing.assert_close(_params(process.checkpoint)[name], value)
    assert process.history[0]["steps/per_completion"] == 1.0


def test_process_advantages_in_the_loop_follow_the_steps(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each completion: a first step over its first character scored 1, a second over the rest scored 0 (when it
    # has more than one character), and one unscoreable step on a one-character completion.
    def two_steps(item: dict[str, Any]) -> list[dict[str, Any]]:
        n = len(item["response"])
        if n <= 1:
            return [{"start": 0, "end": n, "score": None, "status": "no_claim", "detail": None}]
        return [
            {"start": 0, "end": 1, "score": 1.0, "status": "ok", "detail": None},
            {"start": 1, "end": n, "score": 0.0, "status": "ok", "detail": None},
        ]

    seen = _recording(monkeypatch)
    server = StandInServer(steps=two_steps)
    cfg = _config(tiny_model_dir, prompt_files, tmp_path / "p", max_steps=1, advantage_estimator="process")
    train(cfg, scorer=server.scorer())
    [call] = seen
    adv, mask = call["advantages"], call["mask"]
    texts = [item["response"] for item in server.items]
    multi = 0
    for i, text in enumerate(texts):
        n = int(mask[i].sum())
        if len(text) <= 1:
            assert n == 0  # no scored step: not trained on
            continue
        # Every such completion has one step scored 1 and one scored 0: the group's steps have mean 0.5, so the
        # tokens up to the first step's end carry r~(1) + r~(0) = 0 and the rest r~(0) < 0.
        values = adv[i, :n]
        head = values[0]
        assert abs(float(head)) < 1e-5
        change = int((values < -1e-5).to(torch.int64).argmax()) if (values < -1e-5).any() else n
        assert torch.allclose(values[:change], head.expand(change))
        if change < n:
            multi += 1
            assert torch.allclose(values[change:], values[-1].expand(n - change)) and float(values[-1]) < 0
    assert multi > 0


def test_step_tensors_put_nan_where_a_step_has_no_score(tiny_model_dir: Path) -> None:
    from reward_server.client import RewardResult, StepScore

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    batch = TransformersBackend(model, tokenizer).generate(["What is 1 plus 2?"], 2, SamplingParams(max_new_tokens=6))
    results = [
        RewardResult("a", 1.0, "ok", steps=[StepScore(0, 1, 1.0, "ok"), StepScore(1, 2, None, "no_claim")]),
        RewardResult("b", 1.0, "ok", steps=[]),
    ]
    rewards, ends = step_tensors(results, batch, tokenizer)
    assert rewards.shape == (2, 2)
    assert rewards[0, 0] == 1.0 and math.isnan(rewards[0, 1]) and torch.isnan(rewards[1]).all()
    assert ends[0, 0] == int(batch.completion_lengths[0]) - 1  # the last scored step runs to the EOS


# ------------------------------------------------------------------------------------------------ dynamic sampling


def _equal_for_even_rows(item: dict[str, Any]) -> float:
    """Groups of rows 0, 2, 4 ... of the data get equal rewards; the others varied ones."""
    prompt = item["prompt"]
    return 1.0 if prompt in EVEN_PROMPTS else float(len(item["response"]) % 2)


EVEN_PROMPTS: set[str] = set()


def test_dynamic_sampling_keeps_groups_that_differ_and_draws_more(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    import json

    rows = [json.loads(line) for line in prompt_files[0].read_text().splitlines()]
    EVEN_PROMPTS.clear()
    EVEN_PROMPTS.update(r["prompt"] for r in rows[::2])
    server = StandInServer(_equal_for_even_rows)
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", max_steps=2, dynamic_sampling=True, max_num_gen_batches=8
    )
    result = train(cfg, scorer=server.scorer())
    first = result.history[0]
    # Rows come in the run's order: count how many batches of 2 it takes to see 2 odd rows.
    order = indices_from(0, 12 * 3, 12, cfg.seed)
    odd_seen, rounds = 0, 0
    while odd_seen < 2:
        odd_seen += sum(i % 2 == 1 for i in order[2 * rounds : 2 * rounds + 2])
        rounds += 1
    assert first["dynamic_sampling/rounds"] == rounds
    assert first["dynamic_sampling/filled_groups"] == 0
    even_drawn = sum(i % 2 == 0 for i in order[: 2 * rounds])
    assert first["dynamic_sampling/frac_zero_std_before"] == pytest.approx(even_drawn / (2 * rounds))
    assert first["adv/frac_zero_std_groups"] == 0.0  # what the update saw
    # Step 1 starts where step 0's draws ended.
    step1 = {item["prompt"] for item in server.items if "-s1-" in item["id"] and "-r" not in item["id"]}
    assert step1 == {rows[i]["prompt"] for i in order[2 * rounds : 2 * rounds + 2]}


def test_dynamic_sampling_fills_with_equal_groups_when_rounds_run_out(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(lambda item: 1.0)  # every group equal
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1, dynamic_sampling=True, max_num_gen_batches=3
    )
    [row] = train(cfg, scorer=server.scorer()).history
    assert (row["dynamic_sampling/rounds"], row["dynamic_sampling/filled_groups"]) == (3, 2)
    assert row["dynamic_sampling/frac_zero_std_before"] == 1.0
    assert len(server.items) == 3 * 2 * 4


def test_dynamic_sampling_resumes_exactly(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    import json

    rows = [json.loads(line) for line in prompt_files[0].read_text().splitlines()]
    EVEN_PROMPTS.clear()
    EVEN_PROMPTS.update(r["prompt"] for r in rows[::2])
    whole, resumed, _ = _whole_and_resumed(
        tiny_model_dir, prompt_files, tmp_path, _equal_for_even_rows, max_steps=3, dynamic_sampling=True
    )
    for name, value in _params(whole.checkpoint).items():
        torch.testing.assert_close(_params(resumed.checkpoint)[name], value, atol=0, rtol=0)


# --------------------------------------------------------------------------------------------- reference sync


def test_a_reference_reset_every_update_makes_the_next_kl_zero(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(_varied)
    frozen = train(_config(tiny_model_dir, prompt_files, tmp_path / "f", max_steps=2, beta=0.1), scorer=server.scorer())
    synced = train(
        _config(
            tiny_model_dir,
            prompt_files,
            tmp_path / "s",
            max_steps=2,
            beta=0.1,
            sync_ref_model=True,
            ref_model_sync_steps=1,
            ref_model_mixup_alpha=1.0,
        ),
        scorer=server.scorer(),
    )
    assert frozen.history[1]["loss/kl"] > 0  # the policy moved away from its start
    assert synced.history[1]["loss/kl"] == 0.0  # the reference was reset to the policy after step 0's update
    assert synced.history[0]["ref/synced"] == 1.0
    ref = _params(synced.checkpoint / "ref_model")
    for name, value in _params(synced.checkpoint).items():
        torch.testing.assert_close(ref[name], value, atol=0, rtol=0)  # the checkpoint carries it


def test_the_mixup_and_the_resume_carry_the_reference(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    whole, resumed, cut = _whole_and_resumed(
        tiny_model_dir,
        prompt_files,
        tmp_path,
        _varied,
        max_steps=3,
        beta=0.1,
        sync_ref_model=True,
        ref_model_sync_steps=1,
        ref_model_mixup_alpha=0.5,
    )
    # After one sync at alpha 0.5 the reference is the mean of the start and the policy after step 1.
    start, policy1 = _params(tiny_model_dir), _params(cut / "checkpoint-1")
    for name, value in _params(cut / "checkpoint-1" / "ref_model").items():
        torch.testing.assert_close(value, 0.5 * start[name] + 0.5 * policy1[name])
    for name, value in _params(whole.checkpoint).items():
        torch.testing.assert_close(_params(resumed.checkpoint)[name], value, atol=0, rtol=0)
    assert [r["loss/kl"] for r in read_metrics(cut)] == [r["loss/kl"] for r in whole.history]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"sync_ref_model": True}, "needs beta > 0"),
        ({"beta": 0.1, "sync_ref_model": True, "ref_model_mixup_alpha": 0.0}, r"must be in \(0, 1\]"),
        ({"max_completion_length_schedule": {-1: 8}}, "maps a step"),
        ({"max_completion_length_schedule": {10: 0}}, "lengths must be >= 1"),
        ({"advantage_estimator": "prm"}, r"must be one of \(.outcome., .process., .rft., .rloo., .reinforce_plus_plus"),
        ({"max_num_gen_batches": 0}, "must be >= 1"),
        ({"step_separator": ""}, "must not be empty"),
    ],
)
def test_recipe_options_are_checked(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tiny_model_dir, prompt_files, tmp_path, **values)


# -------------------------------------------------------------------------------------- length schedule, loss


def test_the_completion_length_follows_the_schedule(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _recording(monkeypatch)
    server = StandInServer(_varied)
    cfg = _config(
        tiny_model_dir,
        prompt_files,
        tmp_path / "run",
        max_steps=3,
        max_completion_length=6,
        max_completion_length_schedule={1: 2, 2: 3},
        loss_type="dr_grpo",
    )
    assert [cfg.completion_length_at(s) for s in range(4)] == [6, 2, 3, 3]
    history = train(cfg, scorer=server.scorer()).history
    assert [r["completions/max_length"] <= cap for r, cap in zip(history, (6, 2, 3), strict=True)] == [True] * 3
    assert max(i["num_tokens"] for i in server.items if "-s1-" in i["id"]) <= 2
    assert [call["max_completion_length"] for call in seen] == [6, 2, 3]  # dr_grpo's constant follows it


def test_entropy_is_averaged_over_the_tokens_the_loss_counts(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    # One token per completion and every truncated one masked: a completion that ends (EOS first) counts, the
    # others do not; with all masked, no token counts and the entropy is 0, not that of the masked tokens.
    cfg = _config(
        tiny_model_dir,
        prompt_files,
        tmp_path / "run",
        max_steps=1,
        max_completion_length=1,
        mask_truncated_completions=True,
    )
    [row] = train(cfg, scorer=StandInServer(_varied).scorer()).history
    if row["completions/clipped_ratio"] == 1.0:
        assert row["policy/entropy"] == 0.0
    else:
        assert row["policy/entropy"] > 0.0


def test_old_log_probs_are_the_first_iterations_and_equal_a_separate_pass(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At step 0 the reference is the starting policy, and its log-probs come from a separate no-grad forward: the
    # old log-probs kept from the first iteration must equal them, in both iterations, while the second
    # iteration's own log-probs have moved (one optimizer step at lr 0.05 lies between).
    from trainer import train as train_module

    seen = _recording(monkeypatch)
    passes: list[torch.nn.Module] = []
    real_pass = train_module._log_probs_per_micro_batch
    monkeypatch.setattr(
        train_module,
        "_log_probs_per_micro_batch",
        lambda run, model, batch: passes.append(model) or real_pass(run, model, batch),
    )
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1, num_iterations=2, beta=0.05, learning_rate=0.05
    )
    train(cfg, scorer=StandInServer(_varied).scorer())
    assert len(passes) == 1  # the reference's: no old-policy pass
    first, second = seen
    mask = first["mask"].bool()
    for call in (first, second):
        torch.testing.assert_close(call["old_logp"][mask], call["ref_logp"][mask], atol=1e-6, rtol=0)
    assert torch.equal(second["old_logp"], first["old_logp"])
    assert (second["logp"][mask] - first["logp"][mask]).abs().max() > 1e-3


def test_clip_ratio_leaves_out_the_first_iteration(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _recording(monkeypatch)
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1, num_iterations=2, learning_rate=0.05, epsilon=0.01
    )
    [row] = train(cfg, scorer=StandInServer(_varied).scorer()).history
    first, second = (float(call["out"].clip_ratio) for call in seen)
    assert first == 0.0  # ratio 1 by construction
    assert second > 0.0
    assert row["policy/clip_ratio"] == pytest.approx(second)


def test_the_logged_lr_is_the_rate_each_update_ran_at(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg = _config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=4, warmup_steps=2, learning_rate=0.01)
    assert cfg.lr_scheduler_type == "linear"  # TRL's default
    history = train(cfg, scorer=StandInServer(_varied).scorer()).history
    # warm-up 1/3, 2/3, then the peak and a linear decay over the 2 updates left: 1, 1/2
    assert [r["optim/lr"] for r in history] == pytest.approx([0.01 / 3, 0.02 / 3, 0.01, 0.005])


def test_top_k_log_probs_are_those_of_the_truncated_distribution(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    backend = TransformersBackend(model, tokenizer)
    torch.manual_seed(0)
    batch = backend.generate(["What is 1 plus 2?"], 3, SamplingParams(max_new_tokens=5, top_k=1))
    with torch.no_grad():
        logp, _ = completion_log_probs(model, batch, 1.0, top_k=1)
        full, _ = completion_log_probs(model, batch, 1.0)
    mask = batch.completion_mask.bool()
    # top-k 1 is greedy: the truncated distribution puts all its mass on the token sampled.
    assert logp[mask].abs().max() < 1e-5
    assert full[mask].max() < -1e-3  # the full softmax does not


def test_a_top_p_run_trains_with_finite_losses(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", max_steps=2, top_p=0.8, top_k=20, beta=0.05, num_iterations=2
    )
    history = train(cfg, scorer=StandInServer(_varied).scorer()).history
    assert all(math.isfinite(r[k]) for r in history for k in ("loss/policy", "loss/kl", "optim/grad_norm"))
