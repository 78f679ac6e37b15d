"""glibc's malloc keeps a CPU run's freed memory for reuse (trainer/allocator.py), read from glibc's own accounting."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer import allocator, session
from trainer.config import config_from_dict

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024

# A fresh interpreter mallocs 24 MiB, writes it, frees it and mallocs it again; glibc's mallinfo2 says where the
# block lived (in an mmap of its own, or in the heap) and how much free memory the heap kept after the free.
PROBE = """
import ctypes, json, sys
from trainer.allocator import reuse_freed_memory
tuned = reuse_freed_memory() if sys.argv[1] == "tuned" else None
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
size = 24 * 1024 * 1024
block = libc.malloc(size)
ctypes.memset(block, 1, size)
mmapped = libc.mallinfo2().hblkhd
libc.free(block)
kept = libc.mallinfo2().fordblks
again = libc.malloc(size)
print(json.dumps({"tuned": tuned, "mmapped": mmapped, "kept": kept, "same_block": again == block}))
"""

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only (Linux)"
)


def _probe(mode: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    ).stdout
    return dict(json.loads(out))


@glibc
def test_a_freed_block_stays_in_the_heap_and_is_handed_out_again() -> None:
    default, tuned = _probe("default"), _probe("tuned")
    # glibc's defaults: a fresh process serves 24 MiB with an mmap of its own and unmaps it on free
    assert default["mmapped"] >= 24 * MIB  # type: ignore[operator]
    assert default["kept"] < 24 * MIB  # type: ignore[operator]
    # tuned: the block comes from the heap, stays there when freed, and the next malloc of its size gets it back
    assert tuned["tuned"] is True
    assert tuned["mmapped"] < 24 * MIB  # type: ignore[operator]
    assert tuned["kept"] >= 24 * MIB  # type: ignore[operator]
    assert tuned["same_block"] is True


@glibc
def test_the_environment_names_of_the_settings_do_the_same() -> None:
    # benchmarks/trl_pair.py --trl-reuse-freed-memory gives TRL's process allocator.GLIBC_TUNABLES
    through_env = _probe("default", {"GLIBC_TUNABLES": allocator.GLIBC_TUNABLES})
    assert through_env["mmapped"] < 24 * MIB  # type: ignore[operator]
    assert through_env["kept"] >= 24 * MIB  # type: ignore[operator]
    assert through_env["same_block"] is True


def test_nothing_is_changed_off_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    assert allocator.reuse_freed_memory() is False


@pytest.mark.parametrize(
    ("option", "device", "applied"),
    [(True, "cpu", True), (False, "cpu", False), (True, "cuda", False)],
)
def test_only_a_cpu_run_with_the_option_tunes_the_allocator(
    monkeypatch: pytest.MonkeyPatch, option: bool, device: str, applied: bool
) -> None:
    calls: list[None] = []
    monkeypatch.setattr(session, "reuse_freed_memory", lambda: calls.append(None) or True)
    config = config_from_dict({"model_name_or_path": "m", "train_data": "t.jsonl", "reuse_freed_memory": option})
    session.tune_allocator(config, torch.device(device))
    assert len(calls) == int(applied)
