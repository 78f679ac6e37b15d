"""GRPO runs that ``test_distributed.py`` makes in one process and, under ``torchrun``, on two gloo ranks.

Run as a script under ``torchrun --nproc_per_node 2``, it trains every case named on the command line into
``OUT/<case>`` (rank 0 writes the checkpoint and ``history.json``). Imported, it gives the test the same cases for
the one-process reference. Rollouts are fixed per prompt (:class:`FixedRollouts`), so one process and two ranks
update on the same completions, and the updates can be compared to float tolerance.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import torch

from trainer import session as session_module
from trainer import train as train_module
from trainer.config import GRPOConfig, config_from_dict
from trainer.reward_client import RewardScorer
from trainer.rollout.base import Prompt, RolloutBatch, SamplingParams
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.stand_in import StandInServer

# Adam's step is about lr * sign(g); with adam_epsilon 1 it is about lr * g, so a gradient that differs by
# rounding gives an update that differs by rounding, and a wrong normaliser shows as a factor.
COMMON: dict[str, Any] = {
    "max_steps": 1,
    "prompt_batch_size": 4,
    "num_generations": 4,
    "max_completion_length": 6,
    "learning_rate": 0.5,
    "adam_epsilon": 1.0,
    "max_grad_norm": 0.0,
    "progress_bar": False,
    "report_to_tensorboard": False,
    "seed": 7,
}

#: stands for a file of :func:`sft_rows`, written next to the case's output by :func:`config`
PTX_ROWS = "<sft rows>"

CASES: dict[str, dict[str, Any]] = {
    **{loss: {"loss_type": loss} for loss in ("grpo", "bnpo", "dr_grpo", "dapo")},
    **{f"{loss}_ga2": {"loss_type": loss, "gradient_accumulation_steps": 2} for loss in ("grpo", "dr_grpo", "dapo")},
    # the reference, reused rollouts (old log-probs) and the whole batch's std all cross the rank boundary
    "dapo_kl_iter2_batchstd": {
        "loss_type": "dapo",
        "beta": 0.05,
        "num_iterations": 2,
        "gradient_accumulation_steps": 2,
        "scale_rewards": "batch",
    },
    # top_entropy_quantile's threshold is over both ranks' tokens, as one process's is over all of them
    "grpo_top_entropy": {"loss_type": "grpo", "top_entropy_quantile": 0.3},
    # the entropy bonus leaves the chunked LM head as a second output channel: DDP and FSDP reduce its gradient too
    "grpo_entropy_bonus_chunked": {"loss_type": "grpo", "entropy_coeff": 0.05, "logprobs_chunk_tokens": 5},
    "fsdp_dapo_entropy_bonus_chunked": {
        "loss_type": "dapo",
        "entropy_coeff": 0.05,
        "logprobs_chunk_tokens": 5,
        "gradient_accumulation_steps": 2,
        "fsdp": True,
    },
    # the PPO-ptx term: each rank backs its half of the update's rows, normalised by both ranks' tokens
    "dapo_ptx_ga2": {
        "loss_type": "dapo",
        "beta": 0.05,
        "gradient_accumulation_steps": 2,
        "pretrain_data": PTX_ROWS,
        "ptx_coef": 0.5,
        "ptx_batch_size": 4,
    },
    "fsdp_dapo_kl": {"loss_type": "dapo", "beta": 0.05, "gradient_accumulation_steps": 2, "fsdp": True},
    "fsdp_grpo": {"loss_type": "grpo", "fsdp": True},
    # LoRA: only the adapters are replicated (DDP) or sharded (FSDP); the reference is the adapter-less base
    **{
        name: {"loss_type": "dapo", "beta": 0.05, "use_peft": True, "lora_r": 4, "fsdp": fsdp}
        for name, fsdp in (("lora_dapo_kl", False), ("fsdp_lora_dapo_kl", True))
    },
}


def varied(item: dict[str, Any]) -> float:
    """Mixed rewards within groups, so updates have a gradient."""
    return float(len(item["response"]) % 2)


class FixedRollouts(TransformersBackend):
    """Samples each prompt alone, from an RNG seeded by its text: the same completions however the step's prompts
    are split over ranks and chunks."""

    def generate(self, prompts: Sequence[Prompt], num_generations: int, sampling: SamplingParams) -> RolloutBatch:
        batches = []
        for prompt in prompts:
            with torch.random.fork_rng():
                torch.manual_seed(zlib.crc32(str(prompt).encode()))
                batches.append(super().generate([prompt], num_generations, sampling))
        return RolloutBatch.concat(batches, self.pad_token_id)


def config(model_dir: Path, train_file: Path, out: Path, **overrides: Any) -> GRPOConfig:
    values = {"model_name_or_path": str(model_dir), "train_data": str(train_file), "output_dir": str(out)}
    if overrides.get("pretrain_data") == PTX_ROWS:  # one file a rank: two ranks never write one file at once
        rows = out.parent / f"{out.name}_ptx_rows_{os.environ.get('RANK', '0')}.jsonl"
        rows.parent.mkdir(parents=True, exist_ok=True)
        rows.write_text("".join(json.dumps(r) + "\n" for r in sft_rows(train_file)))
        overrides = {**overrides, "pretrain_data": str(rows)}
    return config_from_dict({**values, **COMMON, **overrides})


def run_case(name: str, model_dir: Path, train_file: Path, out_root: Path) -> train_module.TrainResult:
    """Train case ``name`` on fixed rollouts into ``out_root/name``."""
    real = session_module.TransformersBackend
    session_module.TransformersBackend = FixedRollouts  # type: ignore[misc]
    try:
        return train_module.train(
            config(model_dir, train_file, out_root / name, **CASES[name]), scorer=StandInServer(varied).scorer()
        )
    finally:
        session_module.TransformersBackend = real  # type: ignore[misc]


def _resume_cases(model_dir: Path, train_file: Path, out_root: Path) -> None:
    """Sampled (not fixed) rollouts, each rank its own RNG: 3 steps at once, and 1 step then a resume."""
    extra = {"max_steps": 3, "num_iterations": 2, "beta": 0.05, "learning_rate": 1e-2, "adam_epsilon": 1e-8}
    train_module.train(
        config(model_dir, train_file, out_root / "whole", **extra), scorer=StandInServer(varied).scorer()
    )
    # The same run, stopped after step 1: its later checkpoints are removed, as if it had died there (max_steps=1
    # would change the learning-rate schedule, which decays over max_steps).
    cut = out_root / "cut"
    train_module.train(config(model_dir, train_file, cut, **extra, save_steps=1), scorer=StandInServer(varied).scorer())
    if torch.distributed.get_rank() == 0:
        for later in ("checkpoint-2", "checkpoint-3"):
            shutil.rmtree(cut / later)
    torch.distributed.barrier()
    train_module.train(
        config(model_dir, train_file, cut, **extra, resume_from_checkpoint="latest"),
        scorer=StandInServer(varied).scorer(),
    )


#: ``sft`` on 2 ranks against one process: DDP and FSDP2, with gradient accumulation and held-out loss.
SFT_CASES: dict[str, dict[str, Any]] = {
    "sft_ddp": {"gradient_accumulation_steps": 2},
    "sft_fsdp": {"gradient_accumulation_steps": 2, "fsdp": True},
}


def sft_rows(train_file: Path) -> list[dict[str, str]]:
    """Prompt/completion rows from the prompt file: each prompt answered with its ground truth."""
    rows = [json.loads(line) for line in train_file.read_text().splitlines()]
    return [{"prompt": r["prompt"], "completion": f" <answer>{r['ground_truth']}</answer>"} for r in rows]


def run_sft_case(name: str, model_dir: Path, data: Path, out_root: Path) -> train_module.TrainResult:
    """``sft`` case ``name`` (3 steps of 8 rows, eval at each step) into ``out_root/name``."""
    from trainer.config import SFTConfig
    from trainer.sft import sft

    values = {
        "model_name_or_path": str(model_dir),
        "train_data": str(data),
        "eval_data": str(data),
        "eval_steps": 1,
        "output_dir": str(out_root / name),
        "max_steps": 3,
        "batch_size": 8,
        "learning_rate": 0.5,
        "adam_epsilon": 1.0,  # as COMMON: an update about lr * gradient, so a wrong normaliser shows as a factor
        "max_grad_norm": 0.0,
        "progress_bar": False,
        "report_to_tensorboard": False,
        "seed": 7,
        **SFT_CASES[name],
    }
    return sft(config_from_dict(values, cls=SFTConfig))


def _reward_failure_on_rank_1(model_dir: Path, train_file: Path, out_root: Path) -> str:
    """Rank 1's reward server refuses connections from step 1 on; both ranks must stop, with a resume point."""
    server = StandInServer(varied)

    def handler(request: httpx.Request) -> httpx.Response:
        if torch.distributed.get_rank() == 1 and "-s1-" in request.content.decode():
            raise httpx.ConnectError("connection refused")
        return server(request)

    scorer = RewardScorer("http://x", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), max_retries=0)
    try:
        train_module.train(config(model_dir, train_file, out_root / "failure", max_steps=3), scorer=scorer)
    except train_module.RewardServerError as exc:
        return str(exc)
    return "no error"


def main(argv: list[str]) -> None:
    model_dir, train_file, out_root = (Path(a) for a in argv[:3])
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo")  # train() joins it, and leaves it to us
    rank = torch.distributed.get_rank()
    try:
        for name in argv[3:]:
            if name == "resume":
                _resume_cases(model_dir, train_file, out_root)
            elif name in SFT_CASES:
                data = out_root / "sft_rows.jsonl"
                if rank == 0:
                    data.write_text("".join(json.dumps(r) + "\n" for r in sft_rows(train_file)))
                torch.distributed.barrier()
                history = run_sft_case(name, model_dir, data, out_root).history
                if rank == 0:
                    (out_root / name / "history.json").write_text(json.dumps(history))
            elif name == "failure":
                message = _reward_failure_on_rank_1(model_dir, train_file, out_root)
                (out_root / f"failure-rank{rank}.txt").write_text(message)
            else:
                history = run_case(name, model_dir, train_file, out_root).history
                if rank == 0:
                    (out_root / name / "history.json").write_text(json.dumps(history))
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
