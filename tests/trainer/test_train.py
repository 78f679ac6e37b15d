"""The loop on a tiny random model: one update's direction, KL at the reference, null rewards, resume, checkpoints.

Rewards come from a stand-in speaking the ``/v1/rewards`` contract over ``httpx.MockTransport``; the run against a
live ``python -m reward_server`` is in ``test_smoke_live.py``.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr_client.client import RewardItem, RewardServerError
from trainer.algorithms.losses import grpo_loss
from trainer.config import ConfigError, GRPOConfig, config_from_dict
from trainer.data import DataError
from trainer.metrics import read_metrics
from trainer.plot import plot_run
from trainer.reward_client import RewardScorer
from trainer.rollout.base import SamplingParams
from trainer.rollout.forward import completion_log_probs
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.stand_in import StandInServer
from trainer.train import train


def _config(model_dir: Path, files: tuple[Path, Path], out: Path, **overrides: Any) -> GRPOConfig:
    values: dict[str, Any] = {
        "model_name_or_path": str(model_dir),
        "train_data": str(files[0]),
        "output_dir": str(out),
        "max_steps": 2,
        "prompt_batch_size": 2,
        "num_generations": 4,
        "max_completion_length": 6,
        "learning_rate": 1e-2,
        "progress_bar": False,
        "report_to_tensorboard": False,
        "seed": 7,
        **overrides,
    }
    return config_from_dict(values)


def _params(model_or_dir: Any) -> dict[str, torch.Tensor]:
    model = model_or_dir
    if isinstance(model_or_dir, Path):
        model = AutoModelForCausalLM.from_pretrained(model_or_dir)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_one_update_moves_log_probs_the_way_advantages_say(tiny_model_dir: Path, loss_type: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    backend = TransformersBackend(model, AutoTokenizer.from_pretrained(tiny_model_dir))
    torch.manual_seed(0)
    batch = backend.generate(["What is 1 plus 2?"], 4, SamplingParams(max_new_tokens=5))
    assert not torch.equal(batch.completion_ids[0], batch.completion_ids[1])
    mask = batch.completion_mask
    with torch.no_grad():
        before = (completion_log_probs(model, batch, 1.0)[0] * mask).sum(-1)  # (4,) sequence log-probs
    advantages = torch.tensor([1.0, -1.0, 0.0, 0.0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    logp, _ = completion_log_probs(model, batch, 1.0)
    out = grpo_loss(
        logp,
        logp.detach(),
        advantages,
        mask,
        loss_type=loss_type,  # type: ignore[arg-type]
        epsilon=0.2,
        epsilon_high=None,
        beta=0.0,
        ref_logp=None,
        max_completion_length=5,
        num_items_in_batch=mask.sum(),
    )
    out.loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = (completion_log_probs(model, batch, 1.0)[0] * mask).sum(-1)
    assert after[0] > before[0]  # positive advantage: more likely
    assert after[1] < before[1]  # negative advantage: less likely


def test_kl_is_zero_at_the_first_update_when_policy_equals_reference(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(lambda item: float(len(item["response"]) % 2))  # varied rewards: a real gradient
    cfg = _config(tiny_model_dir, prompt_files, tmp_path / "run", beta=0.1, max_steps=2)
    history = train(cfg, scorer=server.scorer()).history
    assert history[0]["loss/kl"] == 0.0  # the policy starts as the reference
    assert history[1]["loss/kl"] > 0.0  # after one update they differ


def test_no_reference_model_is_loaded_when_beta_is_zero(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer import session

    loaded: list[str] = []
    real = session.load_model
    monkeypatch.setattr(session, "load_model", lambda path, *a: loaded.append(path) or real(path, *a))
    train(_config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1), scorer=StandInServer().scorer())
    assert loaded == [str(tiny_model_dir)]  # the policy only


def test_null_rewards_are_left_out_not_zero(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every completion of the first prompt is unscoreable: those rows must not be trained on at all, so they leave
    # the loss mask (no policy or KL gradient) and count in no denominator (the other rows' gradient would shrink).
    from trainer import train as train_module

    seen: list[dict[str, Any]] = []
    real = train_module.grpo_loss

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(
            {"mask": args[3].clone(), **{k: kwargs[k] for k in ("num_items_in_batch", "num_completions_in_batch")}}
        )
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "grpo_loss", recording)

    def null_for_first_group(item: dict[str, Any]) -> float | None:
        return None if "-p0-" in item["id"] else float(len(item["response"]) % 3)

    cfg = _config(tiny_model_dir, prompt_files, tmp_path / "a", max_steps=1, beta=0.1, gradient_accumulation_steps=2)
    result = train(cfg, scorer=StandInServer(null_for_first_group).scorer())
    assert result.history[0]["reward/frac_null"] == 0.5
    first, second = seen  # two micro-batches: group 0's four rows, then group 1's
    assert first["mask"].sum() == 0  # the null group: nothing counts
    assert second["mask"].sum() > 0
    assert int(first["num_completions_in_batch"]) == 4  # the other group's rows only
    assert int(first["num_items_in_batch"]) == int(second["mask"].sum())


def test_gradient_accumulation_matches_one_big_batch(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(lambda item: float(len(item["response"]) % 2))
    one = train(_config(tiny_model_dir, prompt_files, tmp_path / "one", max_steps=1), scorer=server.scorer())
    four = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "four", max_steps=1, gradient_accumulation_steps=4),
        scorer=server.scorer(),
    )
    assert four.history[0]["optim/grad_norm"] == pytest.approx(one.history[0]["optim/grad_norm"], rel=1e-5)
    assert four.history[0]["loss/policy"] == pytest.approx(one.history[0]["loss/policy"], rel=1e-5, abs=1e-7)
    # Adam's first step moves each weight by about +-lr (1e-2); a wrong accumulation would show at that scale,
    # float reordering only far below it (Adam divides tiny gradients by their own size).
    for name, value in _params(one.checkpoint).items():
        torch.testing.assert_close(_params(four.checkpoint)[name], value, atol=1e-4, rtol=0)


@pytest.mark.parametrize("extra", [{}, {"num_iterations": 2, "beta": 0.05, "gradient_accumulation_steps": 2}])
def test_resume_gives_the_same_state_as_an_uninterrupted_run(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, extra: dict[str, Any]
) -> None:
    server = StandInServer(lambda item: float(len(item["response"]) % 2))
    common = {"max_steps": 3, "eval_data": str(prompt_files[1]), "eval_steps": 1, "eval_temperature": 1.0, **extra}
    whole = train(_config(tiny_model_dir, prompt_files, tmp_path / "whole", **common), scorer=server.scorer())

    # The same run, stopped after step 1: its later checkpoints are removed, as if it had died there. (Stopping it
    # with max_steps=1 instead would change the learning-rate schedule, which decays over max_steps.)
    cut = tmp_path / "cut"
    train(_config(tiny_model_dir, prompt_files, cut, **common, save_steps=1), scorer=server.scorer())
    for later in ("checkpoint-2", "checkpoint-3"):
        shutil.rmtree(cut / later)
    resumed = train(
        _config(tiny_model_dir, prompt_files, cut, **common, resume_from_checkpoint="latest"), scorer=server.scorer()
    )

    for name, value in _params(whole.checkpoint).items():
        torch.testing.assert_close(_params(resumed.checkpoint)[name], value, atol=0, rtol=0)
    opt_whole = torch.load(whole.checkpoint / "trainer_state.pt", weights_only=False)
    opt_resumed = torch.load(resumed.checkpoint / "trainer_state.pt", weights_only=False)
    assert opt_whole["scheduler"] == opt_resumed["scheduler"]
    for key, state in opt_whole["optimizer"]["state"].items():
        torch.testing.assert_close(opt_resumed["optimizer"]["state"][key]["exp_avg"], state["exp_avg"], atol=0, rtol=0)

    def without_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "perf/"))} for r in rows]

    # The resumed run's metrics file reads as one run: same steps, same values.
    assert without_timing(read_metrics(cut)) == without_timing(read_metrics(tmp_path / "whole"))
    assert [r["step"] for r in read_metrics(cut)] == [0, 1, 2, 3]


def test_checkpoint_loads_with_from_pretrained_and_plots(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg = _config(
        tiny_model_dir, prompt_files, tmp_path / "run", save_steps=1, save_total_limit=1, report_to_tensorboard=True
    )
    result = train(cfg, scorer=StandInServer(lambda item: float(len(item["response"]) % 2)).scorer())
    assert sorted(p.name for p in result.output_dir.glob("checkpoint-*")) == ["checkpoint-2"]
    loaded = AutoModelForCausalLM.from_pretrained(result.checkpoint)
    assert AutoTokenizer.from_pretrained(result.checkpoint).eos_token is not None
    assert any(not torch.equal(v, _params(tiny_model_dir)[k]) for k, v in _params(loaded).items())
    assert list((result.output_dir / "tensorboard").glob("events.out.tfevents.*"))
    png = plot_run(result.output_dir)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read_metrics(result.output_dir)
    for name in (
        "reward/mean",
        "reward/accuracy",
        "reward/frac_null",
        "adv/frac_zero_std_groups",
        "loss/policy",
        "loss/kl",
        "policy/clip_ratio",
        "policy/entropy",
        "completions/mean_length",
        "completions/clipped_ratio",
        "timing/generate",
        "timing/reward_wait",
        "timing/update",
        "perf/tokens_per_s",
    ):
        assert all(name in r for r in rows), name


def test_an_unreachable_reward_server_stops_the_run(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    scorer = RewardScorer("http://down", client=httpx.AsyncClient(transport=httpx.MockTransport(down)), max_retries=0)
    with pytest.raises(RewardServerError, match="still failing"):
        train(_config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1), scorer=scorer)
    assert not list((tmp_path / "run").glob("checkpoint-*"))


def test_scoring_runs_while_the_caller_keeps_working() -> None:
    """submit() returns at once; a later wait() only pays for what is left of the server's time."""

    async def slow(request: httpx.Request) -> httpx.Response:
        import asyncio

        await asyncio.sleep(0.4)
        items = json.loads(request.content)["items"]
        return httpx.Response(200, json={"results": [{"id": i["id"], "reward": 1.0, "status": "ok"} for i in items]})

    with RewardScorer("http://slow", client=httpx.AsyncClient(transport=httpx.MockTransport(slow))) as scorer:
        start = time.perf_counter()
        future = scorer.submit([RewardItem(id="a", task="math", response="1", ground_truth="1")])
        submitted_s = time.perf_counter() - start
        time.sleep(0.4)  # stands in for generating the next chunk
        results, wait_s = scorer.wait([future])
    assert submitted_s < 0.1
    assert wait_s < 0.15
    assert [r.reward for r in results] == [1.0]


def test_masked_truncated_completions_give_no_update(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    # Two tokens are too few for this random model to reach EOS: every completion is truncated and masked.
    server = StandInServer(lambda item: float(len(item["response"]) % 2))
    cfg = _config(
        tiny_model_dir,
        prompt_files,
        tmp_path / "run",
        max_steps=1,
        max_completion_length=2,
        mask_truncated_completions=True,
    )
    result = train(cfg, scorer=server.scorer())
    assert result.history[0]["completions/clipped_ratio"] == 1.0
    assert result.history[0]["optim/grad_norm"] == 0.0
    for name, value in _params(tiny_model_dir).items():
        assert torch.equal(_params(result.checkpoint)[name], value), name


def test_chat_prompts_without_a_chat_template_fail_before_training(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "2+2?"}], "ground_truth": "4"}) + "\n")
    server = StandInServer()
    cfg = _config(tiny_model_dir, (data, data), tmp_path / "run", max_steps=1)
    with pytest.raises(DataError, match="chat_template"):
        train(cfg, scorer=server.scorer())
    assert server.requests == 0


def _varied(item: dict[str, Any]) -> float:
    """A stand-in rule with mixed rewards within groups, so updates have a gradient."""
    return float(len(item["response"]) % 2)


def _failing_at(step: int) -> httpx.MockTransport:
    """A server that scores every step but ``step``, where the connection is refused (the server was killed)."""
    server = StandInServer(_varied)

    def handler(request: httpx.Request) -> httpx.Response:
        if f"-s{step}-" in request.content.decode():
            raise httpx.ConnectError("connection refused")
        return server(request)

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_reward_failure_mid_run_saves_the_state_before_the_step_and_resume_repeats_it(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, overlap: bool
) -> None:
    common: dict[str, Any] = {
        "max_steps": 3,
        "num_iterations": 2,
        "beta": 0.05,
        "gradient_accumulation_steps": 2,
        "overlap_scoring": overlap,
    }
    whole = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "whole", **common), scorer=StandInServer(_varied).scorer()
    )

    cut = tmp_path / "cut"
    broken = RewardScorer("http://x", client=httpx.AsyncClient(transport=_failing_at(1)), max_retries=0)
    with pytest.raises(
        RewardServerError, match=r"Training stopped at step 1; the state before it is in .*checkpoint-1"
    ):
        train(_config(tiny_model_dir, prompt_files, cut, **common), scorer=broken)
    assert sorted(p.name for p in cut.glob("checkpoint-*")) == ["checkpoint-1"]  # save_steps is 0: only this one
    assert [r["step"] for r in read_metrics(cut)] == [1]

    resumed = train(
        _config(tiny_model_dir, prompt_files, cut, **common, resume_from_checkpoint="latest"),
        scorer=StandInServer(_varied).scorer(),
    )
    for name, value in _params(whole.checkpoint).items():
        torch.testing.assert_close(_params(resumed.checkpoint)[name], value, atol=0, rtol=0)

    def without_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "perf/"))} for r in rows]

    assert without_timing(read_metrics(cut)) == without_timing(read_metrics(tmp_path / "whole"))


def test_a_reward_failure_in_the_first_step_has_nothing_to_save(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    broken = RewardScorer("http://x", client=httpx.AsyncClient(transport=_failing_at(0)), max_retries=0)
    with pytest.raises(RewardServerError, match="no step had finished, so there is nothing to resume from"):
        train(_config(tiny_model_dir, prompt_files, tmp_path / "run"), scorer=broken)
    assert not list((tmp_path / "run").glob("checkpoint-*"))


def test_resuming_a_finished_run(tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path) -> None:
    server = StandInServer(_varied)
    first = train(_config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=2), scorer=server.scorer())
    requests = server.requests
    again = train(
        _config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=2, resume_from_checkpoint="latest"),
        scorer=server.scorer(),
    )
    assert (again.checkpoint, again.history, server.requests) == (first.checkpoint, [], requests)
    with pytest.raises(ConfigError, match=r"max_steps=1 but .*checkpoint-2 is at step 2: raise max_steps"):
        train(
            _config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=1, resume_from_checkpoint="latest"),
            scorer=server.scorer(),
        )


RAISING_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_prompts_are_rendered_before_any_model_loads(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer import session

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = RAISING_TEMPLATE
    tokenizer.save_pretrained(model_dir)
    data = tmp_path / "chat.jsonl"
    rows = [
        {"prompt": [{"role": "user", "content": "What is 1 plus 2?"}], "ground_truth": "3"},
        {"prompt": [{"role": "robot", "content": "What is 2 plus 2?"}], "ground_truth": "4"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(session, "load_model", lambda *a: pytest.fail("the model loaded before the data check"))
    with pytest.raises(DataError, match=r"chat\.jsonl:2: the prompt cannot be rendered: unknown role robot"):
        train(_config(model_dir, (data, data), tmp_path / "run"), scorer=StandInServer().scorer())


def test_prompts_cut_by_max_prompt_length_are_reported(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "long.jsonl"
    rows = [
        {"prompt": "What is 1 plus 2? " * 10, "ground_truth": "3"},
        {"prompt": "What is 1 plus 2?", "ground_truth": "3"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="trainer"):
        train(
            _config(tiny_model_dir, (data, data), tmp_path / "run", max_steps=1, max_prompt_length=12),
            scorer=StandInServer().scorer(),
        )
    assert "1 of 2 prompts are longer than max_prompt_length=12 tokens" in caplog.text


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(
    tiny_model_dir: Path, tmp_path: Path, prompt_files: tuple[Path, Path]
) -> None:
    tok_dir = tmp_path / "tok"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_tokens([f"<extra_{i}>" for i in range(400)])
    tokenizer.save_pretrained(tok_dir)
    cfg = _config(tiny_model_dir, prompt_files, tmp_path / "run", tokenizer_name_or_path=str(tok_dir))
    with pytest.raises(ConfigError, match=r"the tokenizer has \d+ tokens but the model's embedding table only \d+"):
        train(cfg, scorer=StandInServer().scorer())


def _model_variant(tiny_model_dir: Path, out: Path, variant: str) -> Path:
    """The tiny model as a Llama, without a pad token, or with a chat template."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    if variant == "llama":
        from trainer.tiny import build_tiny_model

        build_tiny_model(
            tokenizer, architecture="llama", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1
        ).save_pretrained(out)
    else:
        AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(out)
    if variant == "no_pad":
        tokenizer.pad_token = None
    if variant == "chat":
        tokenizer.chat_template = RAISING_TEMPLATE
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize(
    ("variant", "overrides", "prompt"),
    [
        ("llama", {}, "What is 1 plus 2?"),
        ("no_pad", {}, "What is 1 plus 2?"),  # EOS pads, as TRL does
        ("plain", {"max_completion_length": 1}, "What is 1 plus 2?"),
        ("plain", {"max_completion_length": 1, "mask_truncated_completions": True}, "What is 1 plus 2?"),
        ("chat", {}, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1 plus 2?"}]),
        ("plain", {}, "计算 1 加 2 等于几？ 🙂"),
    ],
)
def test_one_step_runs_on_other_models_and_prompts(
    tiny_model_dir: Path, tmp_path: Path, variant: str, overrides: dict[str, Any], prompt: Any
) -> None:
    model_dir = _model_variant(tiny_model_dir, tmp_path / "model", variant)
    assert (AutoTokenizer.from_pretrained(model_dir).pad_token is None) == (variant == "no_pad")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": prompt, "ground_truth": "3"}, ensure_ascii=False) + "\n")
    server = StandInServer(_varied)
    result = train(_config(model_dir, (data, data), tmp_path / "run", max_steps=1, **overrides), scorer=server.scorer())
    row = result.history[0]
    assert len(server.items) == 2 * 4
    expected_prompt = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    assert {item["prompt"] for item in server.items} == {expected_prompt}
    assert all(math.isfinite(row[k]) for k in ("loss/policy", "policy/entropy", "optim/grad_norm"))
    length = overrides.get("max_completion_length", 6)
    assert 1 <= row["completions/mean_length"] <= length
    if length == 1:  # one token: EOS (a finished completion) or a truncated one
        assert row["completions/mean_length"] == 1.0
        assert all(item["num_tokens"] == 1 for item in server.items)


def test_a_batch_the_server_refuses_says_to_fix_the_request(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(_varied)

    def refuse_step_1(request: httpx.Request) -> httpx.Response:
        if "-s1-" in request.content.decode():
            return httpx.Response(422, json={"detail": "items.0.components: unknown component 'acuracy'"})
        return server(request)

    scorer = RewardScorer("http://x", client=httpx.AsyncClient(transport=httpx.MockTransport(refuse_step_1)))
    with pytest.raises(RewardServerError, match=r"unknown component 'acuracy'.*once the data or reward config"):
        train(_config(tiny_model_dir, prompt_files, tmp_path / "run", max_steps=2), scorer=scorer)
    assert server.requests == 2  # step 0 (two chunks of one prompt) was scored; the refusal came at step 1


def test_sampler_correction_metrics_hand_computed(tiny_model_dir: Path, prompt_files: tuple[Path, Path]) -> None:
    from trainer.rollout.base import RolloutBatch
    from trainer.rollout.correction import SamplerCorrection

    config = _config(tiny_model_dir, prompt_files, Path("unused"), use_vllm=True, vllm_importance_sampling_cap=1.5)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    batch = RolloutBatch(
        prompt_ids=torch.zeros(2, 1, dtype=torch.long),
        prompt_mask=torch.ones(2, 1, dtype=torch.long),
        completion_ids=torch.zeros(2, 3, dtype=torch.long),
        completion_mask=mask,
        is_truncated=torch.tensor([False, False]),
        prompt_index=torch.tensor([0, 0]),
        completion_texts=["", ""],
        sampling_log_probs=torch.tensor([[-1.5, -1.0, -3.0], [-0.25, 0.0, 0.0]]),
    )
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, 0.0, 0.0]])  # old - sampled on tokens: 0.5, -1.0, -0.75
    correction = SamplerCorrection()
    correction.add(0, old, batch, config)
    ratios = [1.5, math.exp(-1.0), math.exp(-0.75)]  # exp(0.5) = 1.65 truncated at the cap 1.5
    assert correction.metrics() == pytest.approx(
        {
            "rollout/logprob_diff": (0.5 + 1.0 + 0.75) / 3,
            "rollout/logprob_diff_max": 1.0,
            "rollout/is_ratio_mean": sum(ratios) / 3,
            "rollout/is_ratio_min": math.exp(-1.0),
            "rollout/is_ratio_max": 1.5,
            "rollout/is_ratio_capped_frac": 1 / 3,
        }
    )
    torch.testing.assert_close(
        correction.weights[0], torch.tensor([[1.5, math.exp(-1.0), 1.0], [math.exp(-0.75), 1, 1]])
    )


def test_use_vllm_without_vllm_installed_says_how_to_install_it(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "trainer.rollout.vllm", None)  # what an environment without vLLM sees
    config = _config(tiny_model_dir, prompt_files, tmp_path / "run", use_vllm=True)
    with pytest.raises(ConfigError, match=r"use_vllm: vLLM is not installed .*pip install -e '\.\[vllm\]'"):
        train(config, scorer=StandInServer().scorer())
