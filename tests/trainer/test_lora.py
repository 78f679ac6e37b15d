"""LoRA with peft: the reference is the adapter-less base, checkpoints hold the adapter, merging, engine weights."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT
from trainer.config import ConfigError, config_from_dict
from trainer.rollout.weights import apply_lora, engine_weights
from trainer.stand_in import StandInServer
from trainer.train import train

pytest.importorskip("peft")


def _varied(item: dict[str, Any]) -> float:
    return float(len(item["response"]) % 2)


def _config(model_dir: Path, data: Path, out: Path, **overrides: Any) -> Any:
    values = {
        "model_name_or_path": str(model_dir),
        "train_data": str(data),
        "output_dir": str(out),
        "max_steps": 2,
        "prompt_batch_size": 2,
        "num_generations": 4,
        "max_completion_length": 6,
        "learning_rate": 5e-2,
        "progress_bar": False,
        "report_to_tensorboard": False,
        "seed": 7,
        "use_peft": True,
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_target_modules": ["q_proj", "v_proj", "up_proj"],
        "beta": 0.1,
        **overrides,
    }
    return config_from_dict(values)


def _lora_model(model_dir: Path) -> Any:
    """A LoRA-wrapped tiny model whose B matrices are random, so the adapters change the outputs."""
    cfg = _config(model_dir, model_dir, model_dir)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(model_dir), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    return model


def test_engine_weights_of_a_plain_model_are_its_state_dict(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    pairs = list(engine_weights(model))
    state = model.state_dict()
    assert [n for n, _ in pairs] == list(state)
    for name, tensor in pairs:
        assert torch.equal(tensor, state[name]) and not tensor.requires_grad


def test_engine_weights_are_the_merged_model_under_the_base_names(tiny_model_dir: Path) -> None:
    model = _lora_model(tiny_model_dir)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    weights = dict(engine_weights(model))
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    base_names = list(AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict())
    assert sorted(weights) == sorted(base_names)  # no lora_A/lora_B, no base_model.model. prefix
    changed = 0
    for name, tensor in merged.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-6, atol=1e-7, msg=name)
        changed += not torch.equal(tensor, AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()[name])
    assert changed == 2 * 3  # q_proj, v_proj and up_proj of both layers
    for name, tensor in model.state_dict().items():  # merging for the engine left the model as it was
        assert torch.equal(tensor, before[name]), name


def test_a_lora_run_with_beta_uses_the_base_as_reference_and_saves_the_adapter(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer import session

    loaded: list[str] = []
    real = session.load_model
    monkeypatch.setattr(session, "load_model", lambda path, *a: loaded.append(path) or real(path, *a))
    result = train(_config(tiny_model_dir, prompt_files[0], tmp_path / "run"), scorer=StandInServer(_varied).scorer())
    assert loaded == [str(tiny_model_dir)]  # no second copy for the reference
    assert result.history[0]["loss/kl"] == 0.0  # LoRA starts with B = 0: the policy is the base
    assert result.history[1]["loss/kl"] > 0.0  # the reference stayed the base while the adapter moved

    files = {p.name for p in result.checkpoint.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_state.pt"} <= files
    assert "model.safetensors" not in files  # the adapter only

    # transformers loads a LoRA checkpoint as base + adapter; the merge command writes one plain model.
    with_adapter = AutoModelForCausalLM.from_pretrained(result.checkpoint)
    merged_dir = tmp_path / "merged"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "merge", str(result.checkpoint), "--output", str(merged_dir)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    assert not (merged_dir / "adapter_config.json").exists()
    ids = torch.tensor([[5, 17, 42, 8, 99]])
    with torch.no_grad():
        base_logits = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
        torch.testing.assert_close(merged(ids).logits, with_adapter(ids).logits, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(merged(ids).logits, base_logits)


def test_a_lora_run_resumes_exactly(tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path) -> None:
    whole = train(
        _config(tiny_model_dir, prompt_files[0], tmp_path / "whole", max_steps=2),
        scorer=StandInServer(_varied).scorer(),
    )
    cut = tmp_path / "cut"
    train(_config(tiny_model_dir, prompt_files[0], cut, max_steps=1), scorer=StandInServer(_varied).scorer())
    resumed = train(
        _config(tiny_model_dir, prompt_files[0], cut, max_steps=2, resume_from_checkpoint="latest"),
        scorer=StandInServer(_varied).scorer(),
    )
    from safetensors.torch import load_file

    a = load_file(whole.checkpoint / "adapter_model.safetensors")
    b = load_file(resumed.checkpoint / "adapter_model.safetensors")
    assert sorted(a) == sorted(b)
    for name, value in a.items():
        torch.testing.assert_close(b[name], value, atol=0, rtol=0)


def test_lora_options_are_checked() -> None:
    base = {"model_name_or_path": "m", "train_data": "d", "use_peft": True}
    with pytest.raises(ConfigError, match=r"lora_r=0: must be >= 1"):
        config_from_dict({**base, "lora_r": 0})
    with pytest.raises(ConfigError, match="reference is the base model with the adapter disabled"):
        config_from_dict({**base, "ref_model_name_or_path": "other"})
    with pytest.raises(ConfigError, match=r"Did you mean 'lora_r'"):
        config_from_dict({**base, "lora_rank": 8})


def test_unknown_target_modules_fail_with_the_option_named(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cfg = _config(tiny_model_dir, prompt_files[0], tmp_path / "run", lora_target_modules=["attn_c"])
    with pytest.raises(ConfigError, match=r"lora_target_modules=\('attn_c',\)"):
        train(cfg, scorer=StandInServer(_varied).scorer())
