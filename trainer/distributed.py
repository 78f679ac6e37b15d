"""The one place that knows about ranks: torch.distributed for the GRPO loop.

The loop in :mod:`trainer.train` reads the same for one process and for many: it asks this module which prompts
its rank owns, reduces across ranks through it, wraps the policy through it, and checks :attr:`Distributed.is_main`
only where a side effect must happen once (logging, writing a checkpoint). This is nanoGPT's seam
(``ddp = int(os.environ.get("RANK", -1)) != -1``), kept in one module.

With one process every method is the identity (no process group is created), so a single-device run does exactly
what it did before this module existed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from trainer.config import ConfigError


@dataclass(frozen=True)
class Distributed:
    """This process's place among the training processes.

    Attributes:
        rank: global rank, ``0 .. world_size - 1``.
        world_size: number of training processes.
        local_rank: rank on this node; picks the CUDA device.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Distributed:
        """The ranks that ``torchrun`` (and ``accelerate launch``) set in ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``;
        one process when they are unset.

        Raises:
            ConfigError: a launcher started more than one process (not built yet).
        """
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size > 1:
            raise ConfigError(f"WORLD_SIZE={world_size}: training on several processes is not built yet")
        return cls()

    @property
    def is_main(self) -> bool:
        """True on the process that logs and writes checkpoints (rank 0)."""
        return self.rank == 0

    def device(self, want_cuda: bool) -> torch.device:
        """This rank's device: ``cuda`` (this node's ``local_rank``-th GPU) or ``cpu``."""
        return torch.device("cuda") if want_cuda else torch.device("cpu")

    def seed(self, seed: int) -> int:
        """The seed of this rank's RNGs: ``seed`` itself on rank 0, so one process draws what it always drew."""
        return seed + self.rank

    def shard(self, n: int) -> slice:
        """The contiguous share of ``n`` items (the step's prompts) that this rank owns; groups stay whole because
        a rank owns whole prompts."""
        return slice(0, n)

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over ranks (a new tensor; the input is left as it was)."""
        return value.clone()

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over ranks."""
        return value.clone()

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        """``(world_size * n, ...)``: every rank's ``(n, ...)`` tensor, concatenated in rank order."""
        return value.clone()

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank (so that all ranks stop together)."""
        return flag

    def close(self) -> None:
        """Destroy the process group, if this module created one."""


__all__ = ["Distributed"]
