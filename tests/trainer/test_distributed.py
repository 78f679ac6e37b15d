"""Two gloo ranks against one process: the same update on the same rollouts, for every loss type; FSDP2; resume;
a reward failure on one rank; the sharding arithmetic of :mod:`trainer.distributed`.

The two-rank runs are one ``torchrun --standalone --nproc_per_node 2`` launch of ``tests/trainer/dist_cases.py``
(about a minute on two loaded cores); the one-process references run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT
from tests.trainer import dist_cases
from trainer.config import ConfigError, config_from_dict
from trainer.distributed import Distributed
from trainer.metrics import read_metrics
from trainer.rollout.weights import engine_weights
from trainer.session import _check_world_size


def _params(path: Path) -> dict[str, torch.Tensor]:
    """The weights a checkpoint holds; a LoRA checkpoint's merged into its base, under the base's names."""
    if (path / "adapter_config.json").exists():
        from peft import PeftModel

        base = json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(path))
        return {k: v.clone() for k, v in engine_weights(model)}
    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every case of ``dist_cases`` trained on 2 gloo ranks; returns the output root."""
    out = tmp_path_factory.mktemp("two_ranks")
    names = [*dist_cases.CASES, *dist_cases.SFT_CASES, "resume", "failure"]
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = ["-m", "tests.trainer.dist_cases", str(tiny_model_dir), str(prompt_files[0]), str(out), *names]
    proc = subprocess.run([*cmd, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", list(dist_cases.CASES))
def test_two_ranks_make_the_update_of_one_process(
    two_ranks: Path, tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, case: str
) -> None:
    one = dist_cases.run_case(case, tiny_model_dir, prompt_files[0], tmp_path)
    two_history = json.loads((two_ranks / case / "history.json").read_text())
    start = _params(tiny_model_dir)
    one_params, two_params = _params(one.checkpoint), _params(two_ranks / case / "checkpoint-1")  # rank 0 wrote it
    for name, before in start.items():
        delta_one = one_params[name] - before
        # lr 0.5 and adam_epsilon 1 make each update about half the gradient: a wrong normaliser (a factor 2 for
        # two ranks) would be far outside this tolerance, float reordering well inside it.
        torch.testing.assert_close(two_params[name] - before, delta_one, rtol=1e-3, atol=1e-6, msg=name)
    assert any(bool((one_params[n] != start[n]).any()) for n in start)  # the update did something
    a, b = one.history[-1], two_history[-1]
    for key in ("reward/mean", "reward/std", "adv/frac_zero_std_groups", "completions/mean_length"):
        assert b[key] == pytest.approx(a[key], rel=1e-6), key
    for key in ("loss/policy", "optim/grad_norm", "policy/entropy", *(["loss/ptx"] if "loss/ptx" in a else [])):
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key


@pytest.mark.slow
@pytest.mark.parametrize("case", list(dist_cases.SFT_CASES))
def test_sft_on_two_ranks_makes_the_updates_of_one_process(
    two_ranks: Path, tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, case: str
) -> None:
    """Each rank trains on its half of the step's rows and the loss is normalised by all ranks' completion tokens,
    so 3 steps on 2 ranks (DDP or FSDP2) equal 3 steps in one process."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in dist_cases.sft_rows(prompt_files[0])))
    one = dist_cases.run_sft_case(case, tiny_model_dir, data, tmp_path)
    two_history = json.loads((two_ranks / case / "history.json").read_text())
    start = _params(tiny_model_dir)
    one_params, two_params = _params(one.checkpoint), _params(two_ranks / case / "checkpoint-3")
    for name, before in start.items():
        torch.testing.assert_close(two_params[name] - before, one_params[name] - before, rtol=1e-3, atol=1e-6)
    assert any(bool((one_params[n] != start[n]).any()) for n in start)
    assert [r["step"] for r in two_history] == [0, 1, 2, 3]
    for a, b in zip(one.history, two_history, strict=True):
        for key in ("loss/sft", "sft/token_accuracy", "sft/completion_tokens", "eval/loss"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5), (a["step"], key)


@pytest.mark.slow
def test_two_rank_resume_repeats_the_uninterrupted_run(two_ranks: Path) -> None:
    whole, cut = _params(two_ranks / "whole" / "checkpoint-3"), _params(two_ranks / "cut" / "checkpoint-3")
    for name, value in whole.items():
        torch.testing.assert_close(cut[name], value, atol=0, rtol=0)

    def without_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "perf/"))} for r in rows]

    assert without_timing(read_metrics(two_ranks / "cut")) == without_timing(read_metrics(two_ranks / "whole"))
    state = torch.load(two_ranks / "cut" / "checkpoint-1" / "trainer_state.pt", weights_only=False)
    ranks = state["rng_ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])  # each rank samples its own


@pytest.mark.slow
def test_a_reward_failure_on_one_rank_stops_both_with_a_resume_point(two_ranks: Path) -> None:
    for rank in (0, 1):
        message = (two_ranks / f"failure-rank{rank}.txt").read_text()
        assert "Training stopped at step 1; the state before it is in" in message, message
    assert "connection refused" in (two_ranks / "failure-rank1.txt").read_text()
    assert "another process" in (two_ranks / "failure-rank0.txt").read_text()
    assert sorted(p.name for p in (two_ranks / "failure").glob("checkpoint-*")) == ["checkpoint-1"]


@pytest.mark.parametrize(
    ("n", "world", "rank", "indices", "kept"),
    [
        (5, 2, 0, [0, 2, 4], 3),
        (5, 2, 1, [1, 3, 1], 2),  # padded by repeating its first prompt, so both ranks generate three
        (1, 2, 1, [0], 0),  # fewer prompts than ranks: only padding
        (4, 1, 0, [0, 1, 2, 3], 4),
    ],
)
def test_shard_padded_hand_computed(n: int, world: int, rank: int, indices: list[int], kept: int) -> None:
    assert Distributed(rank=rank, world_size=world).shard_padded(n) == (indices, kept)


def test_shard_is_contiguous_and_refuses_uneven_splits() -> None:
    assert Distributed(rank=1, world_size=2).shard(8) == slice(4, 8)
    with pytest.raises(ValueError, match="do not split evenly"):
        Distributed(rank=0, world_size=3).shard(8)


def test_a_batch_that_does_not_split_over_the_processes_is_refused() -> None:
    cfg = config_from_dict({"model_name_or_path": "m", "train_data": "d", "prompt_batch_size": 6})
    with pytest.raises(ConfigError, match=r"prompt_batch_size=6 must be a multiple of the 4 processes.*use e\.g\. 4"):
        _check_world_size(cfg, Distributed(rank=0, world_size=4))
    cfg = config_from_dict(
        {
            "model_name_or_path": "m",
            "train_data": "d",
            "prompt_batch_size": 2,
            "num_generations": 3,
            "gradient_accumulation_steps": 2,
        }
    )
    with pytest.raises(ConfigError, match=r"gradient_accumulation_steps=2 must divide each process's 3 completions"):
        _check_world_size(cfg, Distributed(rank=0, world_size=2))
