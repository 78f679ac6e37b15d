"""Held-out evaluation and the reward figures of a step: pass@1 over the same reward server as training.

:func:`evaluate` samples ``eval_num_generations`` completions of each held-out prompt and reports pass@1;
:func:`reward_metrics` gives the ``<prefix>/mean``, ``<prefix>/frac_null`` and per-component means that both a
training step (``reward/*``) and an evaluation (``eval/reward/*``) log.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from rlvr_client.client import RewardResult
from trainer.config import GRPOConfig
from trainer.data import reward_items
from trainer.distributed import Distributed
from trainer.reward_client import RewardScorer
from trainer.rollout.base import GenerationBackend, SamplingParams


def _nanmean(values: Sequence[float | None]) -> float:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


def reward_metrics(results: Sequence[RewardResult], prefix: str) -> dict[str, float]:
    """``<prefix>/mean``, ``<prefix>/frac_null`` and ``<prefix>/<component>`` (mean of scoreable scores)."""
    rewards = [r.reward for r in results]
    metrics = {
        f"{prefix}/mean": _nanmean(rewards),
        f"{prefix}/frac_null": sum(r is None for r in rewards) / max(len(rewards), 1),
    }
    by_component: dict[str, list[float | None]] = defaultdict(list)
    for r in results:
        for name, c in r.components.items():
            by_component[name].append(c.score)
    for name, scores in sorted(by_component.items()):
        metrics[f"{prefix}/{name}"] = _nanmean(scores)
    return metrics


def evaluate(
    backend: GenerationBackend,
    rows: Sequence[dict[str, Any]],
    scorer: RewardScorer,
    config: GRPOConfig,
    id_prefix: str,
    dist: Distributed | None = None,
    max_completion_length: int | None = None,
) -> dict[str, float]:
    """pass@1 on held-out prompts, scored by the same reward server as training.

    pass@1 is the mean ``accuracy`` component score (1 for a correct answer, 0 otherwise) over all scoreable
    completions, ``eval_num_generations`` per prompt (the unbiased pass@1 estimate c/n of Chen et al. 2021,
    averaged over prompts); where the server reports no ``accuracy`` component the reward is used. Completions
    the server could not score are left out and counted in ``eval/frac_null``. With several processes each rank
    evaluates its share of the prompts (:meth:`Distributed.shard_padded`) and the results are gathered.
    ``max_completion_length`` defaults to the config's (the loop passes the scheduled length of the current step).
    """
    dist = dist or Distributed()
    sampling = SamplingParams(
        max_new_tokens=max_completion_length or config.max_completion_length,
        temperature=config.eval_temperature,
        top_p=config.top_p,
        top_k=config.top_k,
    )
    indices, kept = dist.shard_padded(len(rows))
    futures: list[Future[list[RewardResult]]] = []
    lengths: list[int] = []
    for lo in range(0, len(indices), config.eval_chunk_prompts):
        chunk = indices[lo : lo + config.eval_chunk_prompts]
        batch = backend.generate([rows[i][config.prompt_column] for i in chunk], config.eval_num_generations, sampling)
        real = [k for k, p in enumerate(batch.prompt_index.tolist()) if lo + p < kept]  # padding rows are dropped
        items = reward_items(
            rows,
            [chunk[int(batch.prompt_index[k])] for k in real],
            [batch.completion_texts[k] for k in real],
            [int(batch.completion_lengths[k]) for k in real],
            id_prefix,
            config.prompt_column,
            truncated=[bool(batch.is_truncated[k]) for k in real],
        )
        if items:  # a rank with fewer prompts than ranks has only padding
            futures.append(scorer.submit(items))
        lengths.extend(int(batch.completion_lengths[k]) for k in real)
    results, _ = scorer.wait(futures)
    results, lengths = dist.gather_objects(results), dist.gather_objects(lengths)
    correct = [r.components["accuracy"].score if "accuracy" in r.components else r.reward for r in results]
    return {
        "eval/pass@1": _nanmean(correct),
        **reward_metrics(results, "eval/reward"),
        "eval/mean_length": sum(lengths) / max(len(lengths), 1),
        "eval/num_prompts": float(len(rows)),
    }
