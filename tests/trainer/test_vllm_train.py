"""The GRPO loop with ``use_vllm: true`` on CPU: the CLI against a live reward server, resume, overlap, metrics.

Each run builds its own engine (5-30 s on a loaded 2-core machine) and closes it at the end, so the runs here go one
after another in one process. Deselected where vLLM is not installed; .ci/run runs them in the vLLM environment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.conftest import REPO_ROOT
from tests.trainer.test_smoke_live import live_server  # noqa: F401  # the fixture
from tests.trainer.test_train import _config, _params
from trainer.metrics import read_metrics
from trainer.stand_in import StandInServer
from trainer.train import train

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VLLM = {"use_vllm": True, "vllm_weight_sync_tolerance": 1e-5, "max_completion_length": 4, "torch_num_threads": 1}


def _check_rollout_metrics(row: dict[str, Any]) -> None:
    """A train row of a vLLM run: the sync was proven, and the sampler agreed with the policy (fp32, top_p 1)."""
    assert row["rollout/weight_sync_logprob_diff"] < 1e-5
    assert row["rollout/logprob_diff"] < 1e-4
    assert row["rollout/logprob_diff_max"] < 1e-3
    assert row["rollout/is_ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert row["rollout/is_ratio_capped_frac"] == 0.0
    assert row["timing/weight_sync"] > 0
    assert row["completions/max_length"] <= 4  # max_completion_length


def test_two_steps_with_vllm_through_the_cli_against_a_live_server(
    live_server: str,  # noqa: F811
    vllm_model_dir: Path,
    tmp_path: Path,
) -> None:
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": f"What is {a} plus {b}?", "ground_truth": str(a + b)} for a in range(3) for b in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model_name_or_path": str(vllm_model_dir),
        "train_data": str(data),
        "eval_data": str(data),
        "eval_max_prompts": 3,
        "output_dir": str(tmp_path / "run"),
        "reward_server_urls": [live_server],
        "reward_components": {"accuracy": 1.0},
        "max_steps": 2,
        "prompt_batch_size": 4,
        "num_generations": 4,
        "rollout_chunk_prompts": 2,
        "learning_rate": 1e-2,
        "beta": 0.04,
        "progress_bar": False,
        **VLLM,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--config", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = read_metrics(tmp_path / "run")
    assert [r["step"] for r in logged] == [0, 1, 2]
    for row in logged[1:]:
        _check_rollout_metrics(row)
        # Scored by the live server; one item of 16 once came back null (not investigated: likely a deadline at load
        # 12), which the loop leaves out of its group's baseline: not a property of the sampler.
        assert row["reward/frac_null"] < 0.5
    assert 0.0 <= logged[-1]["eval/pass@1"] <= 1.0  # evaluation generated with the synced engine
    start, end = _params(vllm_model_dir), _params(tmp_path / "run" / "checkpoint-2")
    assert any(not torch.equal(start[k], end[k]) for k in start)


def test_resume_with_vllm_repeats_the_uninterrupted_run(
    vllm_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    server = StandInServer(lambda item: float(len(item["response"]) % 2))
    common = {**VLLM, "max_steps": 2, "rollout_chunk_prompts": 1, "num_iterations": 2}
    whole = train(_config(vllm_model_dir, prompt_files, tmp_path / "whole", **common), scorer=server.scorer())
    # Overlap: each chunk of one prompt was sent for scoring on its own, as with the transformers backend.
    assert server.requests == 2 * 2
    whole_items = list(server.items)

    # The same run stopped after step 1 (its last checkpoint removed, as if it had died there): max_steps=1 would
    # change the learning-rate schedule, which decays over max_steps.
    cut = tmp_path / "cut"
    train(_config(vllm_model_dir, prompt_files, cut, **common, save_steps=1), scorer=server.scorer())
    shutil.rmtree(cut / "checkpoint-2")
    del server.items[len(whole_items) + len(whole_items) // 2 :]  # the stopped run's step 2 never happened
    resumed = train(
        _config(vllm_model_dir, prompt_files, cut, **common, resume_from_checkpoint="latest"), scorer=server.scorer()
    )
    # The same completions (request seeds come from torch's RNG, which the checkpoint restores) ...
    assert [i["response"] for i in server.items[len(whole_items) :]] == [i["response"] for i in whole_items]
    # Ids are <run>-s<step>-p<prompt>-c<completion>: the same groups, the run's name aside.
    assert [i["id"].split("-", 1)[1] for i in server.items[len(whole_items) :]] == [
        i["id"].split("-", 1)[1] for i in whole_items
    ]
    # ... and the same weights.
    for name, value in _params(whole.checkpoint).items():
        torch.testing.assert_close(_params(resumed.checkpoint)[name], value, atol=0, rtol=0)
    for row in whole.history:
        _check_rollout_metrics(row)


def _answers_the_sum(item: dict[str, Any]) -> float:
    """Stand-in verifier for ``What is a plus b?``: 1 when the completion starts with the sum."""
    return 1.0 if item["response"].strip().startswith(item["ground_truth"]) else 0.0


def test_rejection_sampling_with_vllm_keeps_what_transformers_keeps(vllm_model_dir: Path, tmp_path: Path) -> None:
    """``sample`` with ``use_vllm``: the engine loads the checkpoint itself (no policy copy, nothing to sync); greedy
    decoding gives transformers' completions, so both backends keep the same verified rows and report the same
    pass@1."""
    from trainer.config import SampleConfig, config_from_dict
    from trainer.sample import sample

    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"What is {a} plus {b}?", "ground_truth": str(a + b)} for a in range(7) for b in range(5)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept: dict[str, list[tuple[str, str]]] = {}
    for name, use_vllm in (("transformers", False), ("vllm", True)):
        cfg = config_from_dict(
            {
                "model_name_or_path": str(vllm_model_dir),
                "data": str(data),
                "output_dir": str(tmp_path / name),
                "num_generations": 1,
                "chunk_prompts": 8,
                "max_completion_length": 4,
                "temperature": 0.0,
                "pass_at_k": [1],
                "keep_truncated": True,
                "progress_bar": False,
                "torch_num_threads": 1,
                "use_vllm": use_vllm,
            },
            cls=SampleConfig,
        )
        server = StandInServer(_answers_the_sum)
        result = sample(cfg, scorer=server.scorer())
        assert len(server.items) == len(rows)
        lines = result.kept_path.read_text().splitlines()
        kept[name] = [(r["prompt"], r["completion"]) for r in map(json.loads, lines)]
        assert result.summary["pass@1"] == pytest.approx(len(kept[name]) / len(rows))
    assert kept["vllm"] == kept["transformers"]
    assert 0 < len(kept["vllm"]) < len(rows)  # the warmed-up model gets some sums right, not all
