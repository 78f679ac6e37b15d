"""Step rewards from the server to tensors: each step's character span mapped to the completion's tokens.

The server returns, for each completion, its reasoning steps as ``[start, end)`` character offsets into the text
it scored (the completion decoded with special tokens skipped) with a score each. Process supervision
(:func:`trainer.algorithms.advantages.process_advantages`) needs, per step, the index of its last token: the first
token whose decoded prefix reaches the step's end. A step the server could not score (``null``: nothing checkable, or a
failure) keeps a NaN reward and adds nothing. The last scored step is extended to the completion's last token
(EOS included): the steps cover only the reasoning, and without this the answer after it and the EOS would get
no advantage at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from rlvr_client.protocol import RewardResult
from trainer.rollout.base import RolloutBatch


def char_end_to_token(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], char_end: int) -> int:
    """Index of the token holding character ``char_end - 1`` of ``decode(ids)``: the smallest ``k`` with
    ``len(decode(ids[: k + 1])) >= char_end`` (a binary search, ``O(log len(ids))`` decodes).

    A byte-level token that ends mid-character decodes to a replacement character, so prefix lengths can step
    back by one at such a token; the search then lands within a token of the exact boundary.
    """
    lo, hi = 0, len(ids) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(list(ids[: mid + 1]), skip_special_tokens=True)) >= char_end:
            hi = mid
        else:
            lo = mid + 1
    return lo


def step_tensors(
    results: Sequence[RewardResult], batch: RolloutBatch, tokenizer: PreTrainedTokenizerBase
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(step_rewards, step_ends)`` for :func:`trainer.algorithms.advantages.process_advantages`.

    Args:
        results: one server result per completion of ``batch``, in order, with ``steps`` asked for.
        batch: the completions.
        tokenizer: the one that decoded them.

    Returns:
        ``(N, S)`` float rewards (NaN where a completion has fewer steps, or a step has no score) and ``(N, S)``
        long token indices of each step's last token, ``S`` the most steps of any completion (at least 1).
    """
    n = len(results)
    width = max([1, *(len(r.steps or ()) for r in results)])
    rewards = torch.full((n, width), math.nan, dtype=torch.float64)  # (N, S)
    ends = torch.zeros((n, width), dtype=torch.long)  # (N, S)
    lengths = batch.completion_lengths.tolist()
    for i, result in enumerate(results):
        length = int(lengths[i])
        ids = batch.completion_ids[i, :length].tolist()
        last_scored = None
        for j, step in enumerate(result.steps or ()):
            if step.score is None or length == 0:
                continue
            rewards[i, j] = step.score
            ends[i, j] = char_end_to_token(tokenizer, ids, step.end)
            last_scored = j
        if last_scored is not None:
            ends[i, last_scored] = length - 1
    return rewards, ends
