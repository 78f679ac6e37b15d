"""trainer/allocator.py: on a CPU, freed memory is reused without page faults (cpu_keep_freed_memory)."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import session as session_module
from trainer.config import config_from_dict
from trainer.distributed import Distributed
from trainer.session import open_session

REPO = Path(__file__).resolve().parents[2]

# Forward and backward of a small Qwen2 (192 hidden, 2 layers, 64 rows x 65 tokens), six times: the minor page
# faults (first touches of a page) of each step.
_STEPS = """
import json, resource, sys
import torch
from trainer.allocator import keep_freed_memory
from trainer.tiny import build_tiny_model, build_tokenizer
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
torch.manual_seed(0)
torch.set_num_threads(1)
tokenizer = build_tokenizer([f"{a} plus {b} is {a + b}" for a in range(30) for b in range(30)], vocab_size=384)
model = build_tiny_model(tokenizer, hidden_size=192, num_layers=2, num_heads=4, num_kv_heads=2, seed=0)
ids = torch.randint(0, len(tokenizer), (64, 65))
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    model.zero_grad(set_to_none=True)
    model(input_ids=ids).logits.log_softmax(-1)[..., 0].mean().backward()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults}))
"""


def _steps(mode: str) -> tuple[object, list[int]]:
    out = subprocess.run(
        [sys.executable, "-c", _STEPS, mode], capture_output=True, text=True, timeout=300, cwd=REPO, check=True
    )
    result = json.loads(out.stdout)
    return result["kept"], result["faults"]


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or ctypes.util.find_library("c") != "libc.so.6", reason="needs glibc"
)
def test_a_training_step_reuses_freed_memory_instead_of_faulting_it_in() -> None:
    kept, kept_faults = _steps("keep")
    default_kept, default_faults = _steps("default")
    assert kept is True and default_kept is None
    # The first step touches new pages either way (about 70k here).
    assert kept_faults[0] > 20_000 and default_faults[0] > 20_000
    # After it, glibc's own thresholds keep handing memory back and faulting it in again (about 6k-11k a step
    # seen here); kept, the later steps mostly reuse what earlier ones freed (0 in most steps seen here).
    assert 2 * sum(kept_faults[2:]) < sum(default_faults[2:])
    assert min(kept_faults[2:]) < 0.01 * kept_faults[0]


@pytest.mark.parametrize(("device", "keep", "calls"), [("cpu", True, 1), ("cpu", False, 0)])
def test_a_cpu_session_keeps_freed_memory_unless_told_not_to(
    tiny_model_dir: Path,
    prompt_files: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    device: str,
    keep: bool,
    calls: int,
) -> None:
    called: list[int] = []
    monkeypatch.setattr(session_module, "keep_freed_memory", lambda: called.append(1) or True)
    config = config_from_dict(
        {
            "model_name_or_path": str(tiny_model_dir),
            "train_data": str(prompt_files[0]),
            "output_dir": str(tmp_path / "run"),
            "device": device,
            "cpu_keep_freed_memory": keep,
        }
    )
    session = open_session(config, Distributed())
    assert session.device.type == "cpu"
    assert len(called) == calls
