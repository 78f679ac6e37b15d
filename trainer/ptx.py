"""The PPO-ptx term: a supervised loss on fixed rows, added to every policy update (``pretrain_data``, ``ptx_coef``).

InstructGPT (arXiv 2203.02155, eq. 2) adds ``gamma * E_{x ~ D_pretrain}[log pi(x)]`` to the RL objective so that
the policy keeps what it knew before RL (its "alignment tax"); OpenRLHF calls the rows ``--pretrain_data`` and the
weight ``--ptx_coef``. Here the rows are SFT rows, read exactly as ``python -m trainer sft`` reads them (a prompt
and a completion, or chat messages), and the term is ``ptx_coef`` times the token-mean negative log-likelihood of
their completion tokens, the loss ``sft`` trains on. A typical use is the cold start's own data: the RL prompts
move the policy where the reward says, and the cold start's rows hold what the reward never checks.

Each optimizer update takes ``ptx_batch_size`` rows in the run's seeded order (:func:`trainer.data.indices_from`
at position ``update * ptx_batch_size``), so a resumed run draws the rows an uninterrupted one would, and every
rank draws the same rows and trains on its share of them. The NLL is normalised by all ranks' completion tokens,
so two ranks make the update of one process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from trainer.data import indices_from, read_named_rows
from trainer.distributed import Distributed
from trainer.rollout.base import PromptEncoder
from trainer.sft_data import SFTExample, collate, completion_nll, encode_rows

logger = logging.getLogger("trainer")


@dataclass(frozen=True)
class PtxColumns:
    """What :func:`trainer.sft_data.encode_rows` reads of a config, for the ``train`` command's ``pretrain_data``."""

    prompt_column: str
    max_prompt_length: int | None
    max_completion_length: int | None
    completion_column: str = "completion"
    messages_column: str = "messages"


@dataclass
class PtxData:
    """The tokenised rows of ``pretrain_data`` and the run's order over them.

    Attributes:
        examples: every row, tokenised (prompt ids, completion ids with the EOS).
        batch_size: rows per optimizer update over all ranks (``ptx_batch_size``).
        seed: the run's seed; the order is a fresh permutation per epoch, seeded by ``(seed, epoch)``.
        pad_token_id: what :func:`trainer.sft_data.collate` pads with.
        coef: the term's weight (``ptx_coef``, > 0).
        parts: forwards over a rank's share of an update's rows (the run's ``gradient_accumulation_steps``).
    """

    examples: list[SFTExample]
    batch_size: int
    seed: int
    pad_token_id: int
    coef: float
    parts: int = 1

    @classmethod
    def load(
        cls,
        source: str,
        *,
        columns: PtxColumns,
        tokenizer: PreTrainedTokenizerBase,
        apply_chat_template: bool,
        eos_token_id: int,
        batch_size: int,
        seed: int,
        coef: float,
        parts: int = 1,
    ) -> PtxData:
        """Read and tokenise every row now, so a bad row fails before the models load, with its line.

        Raises:
            trainer.data.DataError: no such file, no rows, or a row ``sft`` would refuse (named by its line).
        """
        rows, names = read_named_rows(source, "train")
        encoder = PromptEncoder(tokenizer, max_prompt_length=None, apply_chat_template=apply_chat_template)
        examples = encode_rows(rows, encoder, tokenizer, eos_token_id, columns, source, names)
        return cls(examples, batch_size, seed, encoder.pad_token_id, coef, parts)

    def rows_for(self, update: int) -> list[SFTExample]:
        """The ``batch_size`` rows of optimizer update ``update`` (0-based, counted over the whole run)."""
        indices = indices_from(update * self.batch_size, self.batch_size, len(self.examples), self.seed)
        return [self.examples[i] for i in indices]

    def backward(
        self, model: torch.nn.Module, update: int, dist: Distributed, device: torch.device
    ) -> tuple[float, int]:
        """:func:`ptx_backward` of optimizer update ``update``'s rows (:meth:`rows_for`) with this term's weight."""
        rows = self.rows_for(update)
        return ptx_backward(
            model, rows, pad_token_id=self.pad_token_id, coef=self.coef, dist=dist, device=device, parts=self.parts
        )


def ptx_backward(
    model: torch.nn.Module,
    rows: Sequence[SFTExample],
    *,
    pad_token_id: int,
    coef: float,
    dist: Distributed,
    device: torch.device,
    parts: int = 1,
) -> tuple[float, int]:
    """Backward ``coef * NLL / tokens`` for this rank's share of ``rows``, adding to the parameters' gradients.

    ``NLL`` is the summed negative log-likelihood of this rank's completion tokens and ``tokens`` the completion
    tokens of all of ``rows`` (every rank's), times ``world_size`` because DDP and FSDP average the ranks'
    gradients: the update then gets ``coef`` times the token-mean NLL of the whole batch, normalised as
    ``python -m trainer sft`` normalises its step. The share goes through the model in ``parts`` forwards (the
    run's ``gradient_accumulation_steps``, as the policy's rows do), each backed at once, so memory holds one part's
    activations; the sum of the parts' gradients is the whole share's. The caller runs it inside the update's
    ``grad_sync`` context (and autocast).

    Args:
        model: what the update's forward runs through (the policy, or its DDP/FSDP wrapper).
        rows: the update's rows, the same on every rank (:meth:`PtxData.rows_for`).
        pad_token_id: what the rows are padded with (:attr:`PtxData.pad_token_id`).
        coef: ``ptx_coef`` (> 0).
        dist: the processes; this rank takes ``rows[dist.shard(len(rows))]``.
        device: where the model's inputs go.
        parts: forwards over this rank's share (>= 1); the last may have fewer rows.

    Returns:
        ``(nll_sum, num_tokens)`` of this rank's share: nats, and its completion tokens (for the step's log).
    """
    num_tokens = sum(len(e.completion_ids) for e in rows)  # every rank's: the normaliser of one big batch
    mine = list(rows[dist.shard(len(rows))])
    size = max(1, -(-len(mine) // parts))  # rows a forward: ceil, so never more than `parts` forwards
    scale = coef * dist.world_size / max(num_tokens, 1)
    nll_sum, counted_sum = 0.0, 0
    for i in range(0, len(mine), size):
        batch = {k: v.to(device) for k, v in collate(mine[i : i + size], pad_token_id).items()}
        nll, counted, _ = completion_nll(model, batch)
        (nll * scale).backward()
        nll_sum, counted_sum = nll_sum + float(nll.detach()), counted_sum + counted
    return nll_sum, counted_sum
