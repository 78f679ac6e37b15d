"""Two GRPO steps through the CLI against a live ``python -m reward_server`` started here (real HTTP, real math).

The policy is a tiny model warmed up (a few seconds) to answer ``What is a plus b?`` with ``<answer>n</answer>``,
right about half the time, so groups have mixed rewards and the update has a gradient.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from rlvr_client.client import RewardClient, RewardItem
from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT
from trainer.metrics import read_metrics
from trainer.tiny import build_tiny_model, build_tokenizer, supervised_warm_up

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m reward_server`` on a free port with one math worker; its log is printed on failure."""
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {**os.environ, "RLVR_MATH_WORKERS": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reward_server", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        with RewardClient(url) as client:
            client.wait_ready(timeout_s=90)
        yield url
    except TimeoutError:
        pytest.fail(f"reward server did not become ready:\n{log.read_text()[-3000:]}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _run_cli(command: str, config: dict[str, object], path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m trainer COMMAND --config path`` with ``config`` written there; fails the test on a non-zero exit."""
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", command, "--config", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def answering_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 that answers ``<answer>a+b</answer>`` or ``<answer>a+b+1</answer>``, about half each."""
    sums = [(a, b) for a in range(3) for b in range(3)]
    pairs = [(f"What is {a} plus {b}?", f" <answer>{a + b + k}</answer>") for a, b in sums for k in (0, 1)]
    tokenizer = build_tokenizer([p + c for p, c in pairs], vocab_size=280, extra_tokens=["<answer>", "</answer>"])
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, seed=0)
    torch.manual_seed(0)
    supervised_warm_up(model, tokenizer, pairs, steps=150, batch_size=18, learning_rate=1e-2)
    path = tmp_path_factory.mktemp("answering_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _write_config(tmp_path: Path, answering_model: Path, live_server: str) -> Path:
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": f"What is {a} plus {b}?", "ground_truth": str(a + b)} for a in range(3) for b in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model_name_or_path": str(answering_model),
        "train_data": str(data),
        "eval_data": str(data),
        "eval_max_prompts": 3,
        "output_dir": str(tmp_path / "run"),
        "reward_server_urls": [live_server],
        "reward_components": {"accuracy": 1.0},
        "max_steps": 2,
        "prompt_batch_size": 4,
        "num_generations": 8,
        "rollout_chunk_prompts": 2,
        "max_completion_length": 8,
        "learning_rate": 1e-3,
        "beta": 0.04,
        "torch_num_threads": 1,
        "progress_bar": False,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _check_run(tmp_path: Path, answering_model: Path) -> None:
    rows_logged = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows_logged] == [0, 1, 2]
    for r in rows_logged[1:]:
        assert 0.0 <= r["reward/accuracy"] <= 1.0
        assert r["reward/frac_null"] == 0.0
        assert r["adv/frac_zero_std_groups"] < 1.0  # some group had right and wrong answers
    assert 0.0 <= rows_logged[-1]["eval/pass@1"] <= 1.0

    before = AutoModelForCausalLM.from_pretrained(answering_model).state_dict()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-2").state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "two GRPO steps left every parameter as it was"


def test_two_steps_against_a_live_server_change_the_parameters(
    live_server: str, answering_model: Path, tmp_path: Path
) -> None:
    path = _write_config(tmp_path, answering_model, live_server)
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--config", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_run(tmp_path, answering_model)


@pytest.mark.parametrize(
    "launcher",
    [
        ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
        # accelerate's multi-GPU launcher is torchrun underneath; on a CPU-only host the trainer picks gloo
        [
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            "0",
        ],
    ],
    ids=["torchrun", "accelerate"],
)
def test_two_steps_on_two_gloo_ranks_against_a_live_server(
    live_server: str, answering_model: Path, tmp_path: Path, launcher: list[str]
) -> None:
    path = _write_config(tmp_path, answering_model, live_server)
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, *launcher, "-m", "trainer", "train", "--config", str(path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    _check_run(tmp_path, answering_model)
    state = torch.load(tmp_path / "run" / "checkpoint-2" / "trainer_state.pt", weights_only=False)
    assert len(state["rng_ranks"]) == 2  # both ranks took part, rank 0 wrote


def test_rejection_sampling_then_sft_against_a_live_server(
    live_server: str, answering_model: Path, tmp_path: Path
) -> None:
    """R1's phase 3 with the real math verifier: every kept row is one the server verifies, and SFT trains on them."""
    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"What is {a} plus {b}?", "ground_truth": str(a + b)} for a in range(3) for b in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model_name_or_path": str(answering_model),
        "data": str(data),
        "output_dir": str(tmp_path / "sampled"),
        "reward_server_urls": [live_server],
        "reward_components": {"accuracy": 1.0},
        "num_generations": 8,
        "chunk_prompts": 4,
        "max_completion_length": 8,
        "pass_at_k": [1, 8],
        "torch_num_threads": 1,
        "progress_bar": False,
    }
    proc = _run_cli("sample", config, tmp_path / "sample.yaml")
    assert "pass@1:" in proc.stdout and "pass@8:" in proc.stdout
    summary = json.loads((tmp_path / "sampled" / "summary.json").read_text())
    kept = [json.loads(line) for line in (tmp_path / "sampled" / "kept.jsonl").read_text().splitlines()]
    assert 0 < summary["pass@1"] < 1 and summary["pass@1"] <= summary["pass@8"]
    assert len(kept) == summary["num_kept"] > 0

    # Score the kept set again, independently: the server verifies every row of it.
    with RewardClient(live_server) as client:
        again = client.score(
            [
                RewardItem(id=str(i), task="math", response=r["completion"], ground_truth=r["ground_truth"])
                for i, r in enumerate(kept)
            ]
        )
    assert [r.reward for r in again] == [1.0] * len(kept)

    sft_config = {
        "model_name_or_path": str(answering_model),
        "train_data": str(tmp_path / "sampled" / "kept.jsonl"),
        "output_dir": str(tmp_path / "sft"),
        "batch_size": 4,
        "max_steps": 2,
        "learning_rate": 1e-3,
        "torch_num_threads": 1,
        "progress_bar": False,
    }
    _run_cli("sft", sft_config, tmp_path / "sft.yaml")
    assert [r["step"] for r in read_metrics(tmp_path / "sft")] == [1, 2]


def test_process_supervision_against_a_live_server(live_server: str, answering_model: Path, tmp_path: Path) -> None:
    """The real step component: the answers hold no arithmetic claim, so every step comes back null (neutral)."""
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": f"What is {a} plus {b}?", "ground_truth": str(a + b)} for a in range(3) for b in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model_name_or_path": str(answering_model),
        "train_data": str(data),
        "output_dir": str(tmp_path / "run"),
        "reward_server_urls": [live_server],
        "advantage_estimator": "process",
        "max_steps": 1,
        "prompt_batch_size": 2,
        "num_generations": 4,
        "max_completion_length": 8,
        "torch_num_threads": 1,
        "progress_bar": False,
    }
    _run_cli("train", config, tmp_path / "config.yaml")
    [row] = read_metrics(tmp_path / "run")
    assert row["steps/per_completion"] >= 1.0  # the server split every completion into steps
    assert row["steps/frac_scored"] == 0.0  # "<answer>3</answer>" claims nothing checkable
    assert row["loss/policy"] == 0.0  # no scored step: nothing is trained on
