"""The one place that knows about ranks: torch.distributed for the GRPO loop.

The loop in :mod:`trainer.train` reads the same for one process and for many: it asks this module which prompts
its rank owns, reduces across ranks through it, wraps the policy through it, and checks :attr:`Distributed.is_main`
only where a side effect must happen once (logging, writing a checkpoint). This is nanoGPT's seam
(``ddp = int(os.environ.get("RANK", -1)) != -1``), kept in one module.

* Launch: ``torchrun --nproc_per_node N -m trainer train ...`` or ``accelerate launch --num_processes N -m trainer
  train ...``; both set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address, which
  :meth:`Distributed.from_env` reads. The process group uses NCCL on CUDA and gloo on CPU.
* Data: each rank owns a contiguous share of every step's prompts (whole groups), generates their completions
  and requests their rewards itself. Advantages are computed on the rewards of all ranks (gathered), so
  ``scale_rewards: batch`` sees the whole batch.
* Gradients: DDP (replicas, gradients averaged) or FSDP2 (``fully_shard``: parameters, gradients and optimizer
  state sharded over ranks, for a policy that does not fit one device). Because both average gradients over ranks,
  a loss normalised by a count of the whole batch divides each rank's sum by the *mean* count per rank
  (:meth:`Distributed.mean`), as TRL does with ``num_items_in_batch``.

With one process every method is the identity (no process group is created), so a single-device run does exactly
what it did before this module existed.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as tdist
from torch import nn

logger = logging.getLogger("trainer")
T = TypeVar("T")


@dataclass(frozen=True)
class Distributed:
    """This process's place among the training processes, and the collectives the loop needs.

    Attributes:
        rank: global rank, ``0 .. world_size - 1``.
        world_size: number of training processes.
        local_rank: rank on this node; picks the CUDA device.
        fsdp: shard the policy with FSDP2 instead of replicating it with DDP (only with several processes).
        owns_group: this object created the process group, so :meth:`close` destroys it.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    fsdp: bool = False
    owns_group: bool = False

    @classmethod
    def from_env(cls, *, cuda: bool = False, fsdp: bool = False, timeout_s: float = 1800.0) -> Distributed:
        """The ranks that ``torchrun`` (and ``accelerate launch``) set in ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``;
        one process when they are unset. Joins the default process group, creating it (NCCL on CUDA, gloo on CPU)
        unless the caller already has.

        Args:
            cuda: train on CUDA devices (one per local rank).
            fsdp: shard the policy with FSDP2; ignored (with a log line) when there is one process.
            timeout_s: how long a collective waits for the other ranks before failing.
        """
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1:
            if fsdp:
                logger.info("fsdp: true has no effect with one process; training on one device")
            return cls()
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        owns = not tdist.is_initialized()
        if cuda:
            torch.cuda.set_device(local_rank)
        if owns:
            tdist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
        return cls(rank=rank, world_size=world_size, local_rank=local_rank, fsdp=fsdp, owns_group=owns)

    @property
    def is_main(self) -> bool:
        """True on the process that logs and writes checkpoints (rank 0)."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    def device(self, want_cuda: bool) -> torch.device:
        """This rank's device: ``cuda`` (this node's ``local_rank``-th GPU with several processes) or ``cpu``."""
        if not want_cuda:
            return torch.device("cpu")
        return torch.device("cuda", self.local_rank) if self.is_distributed else torch.device("cuda")

    def seed(self, seed: int) -> int:
        """The seed of this rank's RNGs: ``seed + rank``, so ranks sample independently and rank 0 of any run
        draws what one process draws."""
        return seed + self.rank

    # ------------------------------------------------------------------------------------------------ sharding

    def shard(self, n: int) -> slice:
        """This rank's contiguous share of ``n`` items (the step's prompts, or their gathered completions).

        Raises:
            ValueError: ``n`` is not a multiple of ``world_size``.
        """
        if n % self.world_size:
            raise ValueError(f"{n} items do not split evenly over {self.world_size} processes")
        size = n // self.world_size
        return slice(self.rank * size, (self.rank + 1) * size)

    def shard_padded(self, n: int) -> tuple[list[int], int]:
        """Indices of this rank's share of ``n`` items that need not split evenly (held-out prompts).

        Rank ``r`` takes items ``r, r + W, r + 2W, ...``, padded by repeating one of them up to ``ceil(n / W)`` so
        that every rank makes the same number of ``generate`` calls (FSDP needs it); the results of the padding
        are to be dropped.

        Returns:
            ``(indices, kept)``: ``len(indices) == ceil(n / W)``, the first ``kept`` of them are real.
        """
        indices = list(range(self.rank, n, self.world_size))
        kept = len(indices)
        width = -(-n // self.world_size)
        pad = indices[:1] or [0]
        return indices + pad * (width - kept), kept

    # -------------------------------------------------------------------------------------------- collectives

    def _reduce(self, value: torch.Tensor, op: Any) -> torch.Tensor:
        out = value.detach().clone()
        if self.is_distributed:
            moved = out.to(self._collective_device())
            tdist.all_reduce(moved, op=op)
            out = moved.to(value.device)
        return out

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over ranks (a new tensor; the input is left as it was)."""
        return self._reduce(value, tdist.ReduceOp.SUM)

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over ranks (float)."""
        if not self.is_distributed:
            return value.detach().clone()
        return self._reduce(value.to(torch.float64), tdist.ReduceOp.SUM).to(torch.float32) / self.world_size

    def gather(self, value: torch.Tensor) -> torch.Tensor:
        """``(world_size * n, ...)``: every rank's ``(n, ...)`` tensor (same shape on every rank), concatenated in
        rank order."""
        if not self.is_distributed:
            return value.detach().clone()
        moved = value.detach().to(self._collective_device()).contiguous()
        parts = [torch.empty_like(moved) for _ in range(self.world_size)]
        tdist.all_gather(parts, moved)
        return torch.cat(parts).to(value.device)

    def gather_objects(self, values: Sequence[T]) -> list[T]:
        """Every rank's list of picklable objects (reward results), concatenated in rank order."""
        if not self.is_distributed:
            return list(values)
        parts: list[Any] = [None] * self.world_size
        tdist.all_gather_object(parts, list(values))
        return [v for part in parts for v in part]

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank (so that all ranks stop together)."""
        if not self.is_distributed:
            return flag
        return bool(self._reduce(torch.tensor([int(flag)]), tdist.ReduceOp.MAX).item())

    def barrier(self) -> None:
        """Wait until every rank gets here (after rank 0 wrote a checkpoint)."""
        if self.is_distributed:
            tdist.barrier()

    def _collective_device(self) -> torch.device:
        # NCCL reduces CUDA tensors only; gloo CPU ones.
        return torch.device("cuda", self.local_rank) if tdist.get_backend() == "nccl" else torch.device("cpu")

    # ----------------------------------------------------------------------------------------------- the model

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to run the update's forward through: ``model`` itself (one process), a DDP wrapper, or
        ``model`` sharded in place with FSDP2 (each decoder layer, then the root).

        Generation, reference log-probs and saving use ``model`` (:func:`unwrap` of the result): under DDP they
        need no collective; under FSDP ``model`` *is* the sharded module.
        """
        if not self.is_distributed:
            return model
        if self.fsdp:
            self._fully_shard(model)
            return model
        from torch.nn.parallel import DistributedDataParallel

        cuda = next(model.parameters()).device.type == "cuda"
        # No buffer sync at each forward: a causal LM's buffers (rotary frequencies) never change in training.
        # torch 2.13 renamed the option.
        params = inspect.signature(DistributedDataParallel.__init__).parameters
        no_sync: dict[str, Any] = (
            {"forward_sync_buffers": False} if "forward_sync_buffers" in params else {"broadcast_buffers": False}
        )
        return DistributedDataParallel(model, device_ids=[self.local_rank] if cuda else None, **no_sync)

    def shard_frozen(self, model: nn.Module) -> nn.Module:
        """The reference model: sharded like the policy under FSDP (it is as large), otherwise as it is (it gets
        no gradients, so DDP has nothing to do for it)."""
        if self.is_distributed and self.fsdp:
            self._fully_shard(model)
        return model

    def _fully_shard(self, model: nn.Module) -> None:
        from torch.distributed.fsdp import fully_shard

        # The decoder layers are the units that transformers says must not be split (e.g. Qwen2DecoderLayer).
        # DDP broadcasts rank 0's weights when it wraps; fully_shard keeps each rank's own slice, so ranks whose
        # weights differ (a randomly initialised adapter, say) would otherwise train a model no rank holds.
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                tdist.broadcast(tensor.data, src=0)
        names = set(getattr(unwrap(model), "_no_split_modules", None) or ())
        layers = [m for m in model.modules() if type(m).__name__ in names]
        if not layers:
            raise ValueError(f"fsdp: found no decoder layers ({sorted(names) or 'no _no_split_modules'}) to shard")
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)

    @contextlib.contextmanager
    def grad_sync(self, train_model: nn.Module, sync: bool) -> Iterator[None]:
        """Inside, backward passes all-reduce gradients only when ``sync`` (the last micro-batch of an optimizer
        step); earlier micro-batches accumulate locally (nanoGPT's ``require_backward_grad_sync``)."""
        if not self.is_distributed or sync:
            if self.fsdp:
                train_model.set_requires_gradient_sync(True)  # type: ignore[operator]
            yield
        elif self.fsdp:
            train_model.set_requires_gradient_sync(False)  # type: ignore[operator]
            yield
        else:
            with train_model.no_sync():  # type: ignore[operator]
                yield

    def full_norm(self, norm: torch.Tensor) -> float:
        """``clip_grad_norm_``'s result as a number; under FSDP it is a DTensor whose full value is gathered."""
        full = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return float(full)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """Under FSDP, the whole state dict gathered to CPU on rank 0 (a collective: call it on every rank);
        otherwise ``None``, meaning the module's own ``state_dict()`` is already whole."""
        if not (self.is_distributed and self.fsdp):
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return typing.cast(dict[str, torch.Tensor], get_model_state_dict(model, options=options))

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state to save: whole on rank 0 under FSDP (a collective), ``state_dict()`` otherwise."""
        if not (self.is_distributed and self.fsdp):
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=options)

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Restore what :meth:`optimizer_state` returned (every rank reads the same file)."""
        if not (self.is_distributed and self.fsdp):
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))

    def close(self) -> None:
        """Destroy the process group, if this object created it."""
        if self.owns_group and tdist.is_initialized():
            tdist.destroy_process_group()


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (anything else is returned as it is)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


__all__ = ["Distributed", "unwrap"]
