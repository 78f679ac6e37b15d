"""A GRPO run with tools on two gloo ranks (``torchrun --nproc_per_node 2``), for ``test_tools_rollout.py``.

Usage: ``python -m tests.trainer.tools_ddp_case MODEL_DIR TRAIN_FILE OUT TOOLS_URL``; rank 0 writes
``OUT/history.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from trainer.config import config_from_dict
from trainer.stand_in import StandInServer
from trainer.train import train


def main(model_dir: str, train_file: str, out: str, tools_url: str) -> None:
    config = config_from_dict(
        {
            "model_name_or_path": model_dir,
            "train_data": train_file,
            "output_dir": out,
            "max_steps": 1,
            "prompt_batch_size": 4,
            "num_generations": 2,
            "rollout_chunk_prompts": 1,
            "max_completion_length": 40,
            "beta": 0.04,
            "learning_rate": 1e-3,
            "progress_bar": False,
            "report_to_tensorboard": False,
            "tools": ["python"],
            "tool_server_urls": [tools_url],
            "seed": 3,
        }
    )
    result = train(config, scorer=StandInServer().scorer())
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return
    Path(out, "history.json").write_text(json.dumps(result.history))


if __name__ == "__main__":
    main(*sys.argv[1:5])
