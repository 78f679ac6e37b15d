"""The GRPO training loop, to be read top to bottom: :func:`train` runs :func:`trainer.session.setup` once, then
one short function per phase of each step.

1. :func:`sample`: ``num_generations`` completions for each of this rank's prompts, one chunk of prompts at a
   time; each finished chunk of groups goes to the reward server at once. With ``dynamic_sampling`` (DAPO),
   :func:`keep_informative_groups` then drops groups whose rewards are all equal and samples more prompts.
2. :func:`ref_log_probs`: reference log-probs, computed while the last chunk is scored. (The old-policy log-probs
   that ``num_iterations > 1`` needs are the first iteration's own, kept by :func:`update`.)
3. :func:`score`: wait for the rewards.
4. :func:`compute_advantages`: the advantages of the config's ``advantage_estimator`` (looked up in
   :data:`trainer.algorithms.advantages.ADVANTAGE_ESTIMATORS`) and the tokens the loss counts.
5. :func:`update`: ``num_iterations`` optimizer steps, with gradient accumulation and clipping, the loss
   aggregated as ``loss_type`` says (:data:`trainer.algorithms.losses.LOSS_TYPES`); :func:`sync_reference_when_due`
   after each.
6. :func:`step_metrics` and :func:`end_step`: log, evaluate, checkpoint.

What the phases hand each other (:class:`~trainer.phases.StepStart`, ``Rollouts``, ``Scored``, ``Advantages``) is
in :mod:`trainer.phases`; what they share, the :class:`~trainer.session.Run`, in :mod:`trainer.session`.

The math is in :mod:`trainer.algorithms` (DeepSeekMath arXiv 2402.03300, DAPO 2503.14476, Dr. GRPO 2503.20783);
rewards come only over HTTP (:mod:`trainer.reward_client`); generation sits behind
:class:`trainer.rollout.base.GenerationBackend`, and the sampler correction next to it
(:mod:`trainer.rollout.correction`); ranks, sharding and reductions are in :mod:`trainer.distributed`;
held-out pass@1 is :func:`trainer.evaluation.evaluate`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from rlvr_client.protocol import RewardResult, RewardServerError
from trainer.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    StepRewards,
    frac_zero_std_groups,
    group_stats,
    zero_advantage_groups,
)
from trainer.algorithms.entropy import high_entropy_mask, pad_for_gather
from trainer.algorithms.losses import grpo_loss
from trainer.checkpoint import rng_state, save_on_ranks
from trainer.config import GRPOConfig
from trainer.data import indices_from, reward_items
from trainer.distributed import Distributed
from trainer.evaluation import evaluate, reward_metrics
from trainer.metrics import PhaseTimer
from trainer.optim import current_lr
from trainer.phases import Advantages, Rollouts, Scored, StepStart
from trainer.reward_client import RewardScorer
from trainer.rollout.base import RolloutBatch, SamplingParams
from trainer.rollout.correction import SamplerCorrection
from trainer.rollout.forward import completion_log_probs
from trainer.session import Run, TrainResult, setup, wants_cuda
from trainer.steps import step_tensors
from trainer.tools.rollout import reset_tool_stats, tool_metrics

logger = logging.getLogger("trainer")


# ------------------------------------------------------------------------------------------------------------ phases


def sample(run: Run, start: StepStart, round_index: int = 0) -> Rollouts:
    """Phase 1: sample ``num_generations`` completions for each of this rank's prompts, a chunk at a time.

    The prompts are the next ``prompt_batch_size`` of the run's order (round ``r`` of dynamic sampling takes the
    ``r``-th batch after the step's first). A finished chunk goes to the reward server at once, so it is scored
    while the next chunk generates. Item ids and group ids use the prompt's place in the whole step, so they are
    the same for any number of ranks. Completions are at most ``max_completion_length`` tokens, as the schedule
    gives it for this step.
    """
    config = run.config
    position = run.prompt_cursor + round_index * config.prompt_batch_size
    indices = indices_from(position, config.prompt_batch_size, len(run.train_rows), config.seed)
    rows = [run.train_rows[i] for i in indices]
    mine = run.dist.shard(len(rows))  # whole prompts, so whole groups
    prompts = [row[config.prompt_column] for row in rows[mine]]
    sampling = dataclasses.replace(
        SamplingParams.from_config(config), max_new_tokens=config.completion_length_at(start.step)
    )
    prefix = f"{run.run_name}-s{start.step}" + (f"-r{round_index}" if round_index else "")
    chunks, futures = [], []
    for lo in range(0, len(prompts), config.chunk_prompts):
        with start.timer("generate"):
            chunk = run.backend.generate(prompts[lo : lo + config.chunk_prompts], config.num_generations, sampling)
        items = reward_items(
            rows,
            (chunk.prompt_index + mine.start + lo).tolist(),
            chunk.completion_texts,
            chunk.completion_lengths.tolist(),
            prefix,
            config.prompt_column,
            steps=_steps_request(config),
            truncated=chunk.is_truncated.tolist(),
        )
        futures.append(run.scorer.submit(items))
        chunks.append(chunk)
        if not config.overlap_scoring:  # the no-overlap baseline: block on this chunk's rewards now
            start.timer.add("reward_wait", _wait_or_stop(run, futures[-1:], start)[1])
    batch = RolloutBatch.concat(chunks, run.backend.pad_token_id)  # (N = B / W * G rows)
    return Rollouts(
        rows=rows,
        batch=batch,
        group_ids=batch.prompt_index + mine.start,
        futures=futures,
        prompts_drawn=config.prompt_batch_size,
    )


def _steps_request(config: GRPOConfig) -> dict[str, str] | None:
    """What each reward item asks the server for its steps, when the estimator reads them (``None`` otherwise)."""
    if not ADVANTAGE_ESTIMATORS.get(config.advantage_estimator).needs_steps:
        return None
    return {"component": config.step_component, "separator": config.step_separator}


def _filter_score(result: RewardResult, metric: str | None) -> float:
    """The score dynamic sampling compares within a group (``dynamic_sampling_metric``): the reward (``reward``),
    a component's score (its name), or by default ``accuracy`` where the result has it, else the reward; NaN where
    that score is null."""
    if metric is None:
        metric = "accuracy" if "accuracy" in result.components else "reward"
    if metric == "reward":
        value = result.reward
    else:
        component = result.components.get(metric)
        value = component.score if component is not None else None
    return math.nan if value is None else float(value)


def keep_informative_groups(run: Run, start: StepStart, first: Rollouts) -> Rollouts:
    """Phase 1b, DAPO's dynamic sampling (arXiv 2503.14476, section 3.2): drop the groups whose rewards are all
    equal (advantage 0: no policy gradient) and sample further batches of prompts until the step holds
    ``prompt_batch_size`` groups that differ, for at most ``max_num_gen_batches`` batches in all.

    "Equal" is judged on ``dynamic_sampling_metric`` (verl's ``algorithm.filter_groups.metric``): by default the
    ``accuracy`` score where the results have one, so that an all-wrong group whose format or length shaping
    differs does not survive to train on shaping alone; equal up to rounding counts as equal
    (:data:`trainer.algorithms.advantages.ZERO_SPREAD_RTOL`).

    This waits for each batch's rewards, so scoring no longer overlaps the old/reference log-probs. When the
    rounds run out first, the step is filled with equal groups, in the order they were sampled, so the batch keeps
    its shape (they add KL gradient only). With several processes each fills its own share of the groups, and all
    sample another round while any of them is short (so they call ``generate`` equally often). Logged: the share
    of zero-std groups before filtering (of every batch sampled), the rounds used and the groups filled in that way.
    """
    config, dist = run.config, run.dist
    mine = dist.shard(config.prompt_batch_size)
    want = mine.stop - mine.start  # this rank's groups
    kept: list[tuple[Rollouts, int, list[RewardResult]]] = []  # (the round's rollouts, its group id, results)
    equal: list[tuple[Rollouts, int, list[RewardResult]]] = []
    rounds, rollouts, total_groups = 0, first, 0
    while True:
        rounds += 1
        results, _ = _wait_or_stop(run, rollouts.futures, start)
        metric = torch.tensor([_filter_score(r, config.dynamic_sampling_metric) for r in results])  # (n,)
        group_ids = rollouts.group_ids.cpu()  # (n,)
        stats = group_stats(metric, group_ids)
        for g in range(stats.num_groups):
            rows_g = (stats.group_index == g).nonzero().squeeze(-1)
            target = kept if bool(stats.spread[rows_g[0]]) else equal
            target.append((rollouts, int(group_ids[rows_g[0]]), [results[int(i)] for i in rows_g]))
        total_groups += stats.num_groups
        if not dist.any(len(kept) < want) or rounds >= config.max_num_gen_batches:
            break
        rollouts = sample(run, start, round_index=rounds)
    chosen = (kept + equal)[:want]
    parts, results_out = [], []
    for source, gid, group_results in chosen:
        parts.append(source.batch.select((source.group_ids.cpu() == gid).nonzero().squeeze(-1)))
        results_out.extend(group_results)
    batch = RolloutBatch.concat(parts, run.backend.pad_token_id)
    local = torch.arange(len(parts)).repeat_interleave(torch.tensor([p.completion_ids.shape[0] for p in parts]))
    batch = dataclasses.replace(batch, prompt_index=local.to(batch.prompt_index.device))  # (N,) 0..want-1
    done: Future[list[RewardResult]] = Future()
    done.set_result(results_out)
    counts = dist.sum(torch.tensor([len(equal), total_groups, max(0, want - len(kept))], dtype=torch.float64))
    return Rollouts(
        rows=first.rows,
        batch=batch,
        group_ids=local + mine.start,  # whole groups on each rank, numbered over the step as in sample()
        futures=[done],
        prompts_drawn=rounds * config.prompt_batch_size,
        metrics={
            "dynamic_sampling/frac_zero_std_before": float(counts[0] / max(float(counts[1]), 1.0)),
            "dynamic_sampling/rounds": float(rounds),
            "dynamic_sampling/filled_groups": float(counts[2]),
        },
    )


def ref_log_probs(run: Run, batch: RolloutBatch, timer: PhaseTimer) -> list[torch.Tensor] | None:
    """Phase 2: per micro-batch ``(b, c)`` reference log-probs, ``None`` when ``beta == 0``. They need no rewards,
    so they run while the last chunk is still being scored.

    There is no old-policy pass: every micro-batch of :func:`update`'s first iteration runs at the parameters
    that sampled the batch (the optimizer steps once all of them are done), so its log-probs, detached, are the
    old policy's. TRL and verl spend a separate forward on them when ``num_iterations > 1``; this one saves it.
    """
    with timer("logprobs"):
        if run.ref_model is None:
            return None
        with run.ref_context():
            return _log_probs_per_micro_batch(run, run.ref_model, batch)


def _shares_prompts(run: Run) -> bool:
    """Whether the log-prob forwards run each group's prompt once (``shared_prefix_forward``): on one process only,
    since a DDP or FSDP module would see two forwards before one backward."""
    return run.config.shared_prefix_forward and not run.dist.is_distributed


@torch.no_grad()
def _log_probs_per_micro_batch(run: Run, model: torch.nn.Module, batch: RolloutBatch) -> list[torch.Tensor]:
    """Log-probs of each micro-batch under ``model`` without grad: the reference log-probs."""
    out = []
    for rows in run.micro:
        with run.autocast():
            logp, _ = completion_log_probs(
                model,
                batch.select(rows),
                run.config.temperature,
                chunk_tokens=run.config.logprobs_chunk_tokens,
                share_prompts=_shares_prompts(run),
                top_k=run.config.top_k,
                top_p=run.config.top_p,
            )
        out.append(logp.float())
    return out


def score(run: Run, rollouts: Rollouts, start: StepStart) -> Scored:
    """Phase 3: wait for the rewards of every chunk; a null reward becomes NaN, as does the reward of a rollout that a
    tool's infrastructure fault cut short (:mod:`trainer.tools.rollout`)."""
    results, wait_s = _wait_or_stop(run, rollouts.futures, start)
    start.timer.add("reward_wait", wait_s)
    rewards = torch.tensor([math.nan if r.reward is None else r.reward for r in results])  # (N,)
    if rollouts.batch.tool_failed is not None:  # a tool's infrastructure fault cut the rollout: not the model's fault
        rewards[rollouts.batch.tool_failed.cpu()] = math.nan
    return Scored(results=results, rewards=rewards)


def compute_advantages(run: Run, rollouts: Rollouts, scored: Scored) -> Advantages:
    """Phase 4: rewards to advantages, and the tokens the loss counts.

    The estimator is the config's ``advantage_estimator``, looked up in
    :data:`trainer.algorithms.advantages.ADVANTAGE_ESTIMATORS` (its entries say what each computes); every one gets
    the same inputs: this rank's rewards, verified flags and step rewards, the group ids, and the reductions over
    ranks. A completion the estimator does not train on (a null reward, or no scored step) gets advantage 0 and
    leaves the loss mask, so it counts in no denominator and gets no KL gradient; an infrastructure failure is not a
    wrong answer.
    """
    config, dist = run.config, run.dist
    batch = rollouts.batch
    estimator = ADVANTAGE_ESTIMATORS.get(config.advantage_estimator)
    loss_mask = batch.model_token_mask.clone()  # (N, C); tool output is context, never loss
    if config.mask_truncated_completions:
        loss_mask[batch.is_truncated] = 0
    inputs = AdvantageInputs(
        rewards=scored.rewards,
        verified=torch.tensor([_verified(r) for r in scored.results], dtype=torch.float32),  # (N,)
        group_ids=rollouts.group_ids.cpu(),  # (N,)
        steps=_step_rewards(scored.results, batch, run.tokenizer),
        num_tokens=batch.completion_ids.shape[1],
        token_counts=loss_mask.sum(-1).cpu(),  # (N,)
        seed=config.seed * 1_000_003 + run.prompt_cursor,
        reduce=dist,
    )
    out = estimator.compute(inputs, config)  # (N,) or (N, C) advantages
    loss_mask[~out.trained.to(loss_mask.device)] = 0
    if config.mask_zero_advantage_groups:
        loss_mask[zero_advantage_groups(out.advantages, inputs.group_ids).to(loss_mask.device)] = 0
    return Advantages(
        advantages=out.advantages.to(run.device),
        loss_mask=loss_mask,
        num_items_in_batch=dist.mean(loss_mask.sum()),
        num_completions_in_batch=dist.mean((loss_mask.sum(-1) > 0).sum()),
        num_items_in_micro_batch=dist.mean(torch.stack([loss_mask[rows].sum() for rows in run.micro])),
        metrics=out.metrics,
    )


def _step_rewards(
    results: Sequence[RewardResult], batch: RolloutBatch, tokenizer: PreTrainedTokenizerBase
) -> StepRewards:
    """The step rewards of ``results`` (:func:`trainer.steps.step_tensors`); without a decode when no result
    carries steps (none were asked for): ``(N, 1)`` all NaN, as ``step_tensors`` gives then."""
    counts = torch.tensor([len(r.steps or ()) for r in results])  # (N,)
    if not counts.any():
        return StepRewards(
            torch.full((len(results), 1), math.nan, dtype=torch.float64),
            torch.zeros(len(results), 1, dtype=torch.long),
            counts,
        )
    return StepRewards(*step_tensors(results, batch, tokenizer), counts)


def _verified(result: RewardResult) -> float:
    """1.0 for a verified completion (its ``accuracy`` score is 1, or without that component its reward is at least
    1), 0.0 otherwise, NaN where the reward is null."""
    if result.reward is None:
        return math.nan
    accuracy = result.components.get("accuracy")
    score = accuracy.score if accuracy is not None else result.reward
    return 1.0 if score is not None and score >= 1.0 else 0.0


def _grad_cosine(run: Run, trainable: list[torch.nn.Parameter]) -> float:
    """The cosine between the gradient now in ``trainable`` and the one kept from the last call (NaN on the first);
    keeps this one. Sums the dot product and norms over ranks, so sharded (FSDP) gradients give the whole-model
    figure, and replicated (DDP) ones the same figure as one process."""
    parts = []
    for p in trainable:
        if p.grad is not None:
            g = p.grad.detach()
            parts.append((g.to_local() if hasattr(g, "to_local") else g).flatten().float())
    grad = torch.cat(parts) if parts else torch.zeros(0)
    last, run.last_grad = run.last_grad, grad.clone()
    if last is None or last.shape != grad.shape:
        return math.nan
    dot, n1, n2 = run.dist.sum(torch.stack([(grad * last).sum(), (grad * grad).sum(), (last * last).sum()]).double())
    return float(dot / (n1.sqrt() * n2.sqrt())) if n1 > 0 and n2 > 0 else math.nan


def update(
    run: Run,
    start: StepStart,
    batch: RolloutBatch,
    adv: Advantages,
    ref_logps: list[torch.Tensor] | None,
) -> dict[str, float]:
    """Phase 5: ``num_iterations`` optimizer steps on this batch, each accumulating gradient over the
    micro-batches (gradients are all-reduced across ranks on the last one only), then clipping the global norm;
    after each, :func:`sync_reference_when_due`. The loss is :func:`trainer.algorithms.losses.grpo_loss`, aggregated
    as ``loss_type`` names it, plus with ``pretrain_data`` the PPO-ptx term (:meth:`trainer.ptx.PtxData.backward`:
    ``ptx_coef`` times the token-mean NLL of ``ptx_batch_size`` fixed SFT rows, each update its own rows).

    Returns:
        ``loss/policy``, ``loss/kl``, ``policy/clip_ratio``, ``policy/entropy``, ``policy/entropy_trained`` (the
        entropy of the tokens the policy term trains on: ``top_entropy_quantile``'s share), ``optim/grad_norm`` (over
        iterations, micro-batches and ranks), ``optim/lr`` (the rate of the step's last update), ``ref/synced``
        (reference syncs in this step), with ``pretrain_data`` ``loss/ptx`` (the PPO-ptx rows' token-mean NLL over
        the step's updates, nats) and, with ``log_grad_cosine``, ``optim/grad_cosine`` (this step's first
        gradient against the last step's, before clipping). The clip ratio leaves out iteration 0 when
        ``num_iterations > 1``: there the ratio is 1 by construction, and counting it would halve the figure at
        ``num_iterations: 2``. The entropy is averaged over the tokens the loss counts.
    """
    config, dist = run.config, run.dist
    stats: dict[str, list[float]] = defaultdict(list)
    entropy_sums = torch.zeros(4, dtype=torch.float64)  # entropy and tokens: all counted, then trained
    lr = current_lr(run.optimizer)
    select_by_entropy = config.top_entropy_quantile < 1.0
    entropy_bonus = config.entropy_coeff != 0.0  # the entropy keeps its graph, every iteration
    correction = SamplerCorrection()
    old_logps: list[torch.Tensor] = []  # per micro-batch (b, c): the first iteration's log-probs, detached
    ptx_totals = torch.zeros(2, dtype=torch.float64)  # the PPO-ptx term's NLL (nats) and completion tokens
    with start.timer("update"):
        for iteration in range(config.num_iterations):
            policy_loss = 0.0
            if run.ptx is not None:  # accumulated like one more micro-batch: the last one all-reduces the sum
                with dist.grad_sync(run.train_model, sync=False), run.autocast():
                    nll, tokens = run.ptx.backward(
                        run.train_model, start.step * config.num_iterations + iteration, dist, run.device
                    )
                ptx_totals += torch.tensor([nll, float(tokens)], dtype=torch.float64)
            for k, rows_k in enumerate(run.micro):
                mb = batch.select(rows_k)
                width = mb.completion_ids.shape[1]
                with dist.grad_sync(run.train_model, sync=k == len(run.micro) - 1):
                    with run.autocast():
                        logp, entropy = completion_log_probs(
                            run.train_model,
                            mb,
                            config.temperature,
                            with_entropy=iteration == 0 or select_by_entropy,
                            chunk_tokens=config.logprobs_chunk_tokens,
                            share_prompts=_shares_prompts(run),
                            top_k=config.top_k,
                            top_p=config.top_p,
                            entropy_grad=entropy_bonus,
                        )  # (b, c)
                    entropy_with_grad, entropy = entropy, None if entropy is None else entropy.detach().float()
                    if iteration == 0:  # no optimizer step yet: these are the sampling policy's log-probs
                        old_logps.append(logp.detach().float())
                    old_logp = old_logps[k]  # (b, c)
                    if iteration == 0 and mb.sampling_log_probs is not None:  # pi_old is fixed for the whole batch
                        correction.add(k, old_logp, mb, config)
                    mask_k = adv.loss_mask[rows_k][:, :width]  # (b, c)
                    advantages_k = adv.advantages[rows_k]  # (b,) or (b, C)
                    token_mask = None
                    if select_by_entropy:
                        assert entropy is not None
                        token_mask = high_entropy_mask(entropy, mask_k, config.top_entropy_quantile, dist_gather(dist))
                    out = grpo_loss(
                        logp.float(),
                        old_logp,
                        advantages_k[:, :width] if advantages_k.ndim == 2 else advantages_k,
                        mask_k,
                        loss_type=config.loss_type,
                        epsilon=config.epsilon,
                        epsilon_high=config.epsilon_high,
                        beta=config.beta,
                        ref_logp=ref_logps[k] if ref_logps is not None else None,
                        max_completion_length=config.completion_length_at(start.step),
                        num_items_in_batch=adv.num_items_in_batch,
                        num_completions_in_batch=adv.num_completions_in_batch,
                        num_items_in_micro_batch=adv.num_items_in_micro_batch[k],
                        gradient_accumulation_steps=config.gradient_accumulation_steps,
                        importance_weights=correction.weights.get(k),
                        options=config,
                        sampling_logp=None if mb.sampling_log_probs is None else mb.sampling_log_probs.float(),
                        token_mask=token_mask,
                        entropy=entropy_with_grad if entropy_bonus else None,
                    )
                    out.loss.backward()
                policy_loss += out.policy_loss.item()
                stats["kl"].append(out.kl.item())
                if iteration > 0 or config.num_iterations == 1:
                    stats["clip_ratio"].append(out.clip_ratio.item())
                if entropy is not None and iteration == 0:
                    counted = mask_k.to(entropy.dtype)  # (b, c)
                    trained = counted if token_mask is None else token_mask.to(entropy.dtype)  # (b, c)
                    entropy_sums += torch.tensor(
                        [
                            float((entropy * counted).sum()),
                            float(counted.sum()),
                            float((entropy * trained).sum()),
                            float(trained.sum()),
                        ],
                        dtype=torch.float64,
                    )
            stats["policy_loss"].append(policy_loss)
            max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
            trainable = [p for p in run.model.parameters() if p.requires_grad]
            if config.log_grad_cosine and iteration == 0:  # before clipping: the step's own direction
                stats["grad_cosine"].append(_grad_cosine(run, trainable))
            stats["grad_norm"].append(dist.full_norm(torch.nn.utils.clip_grad_norm_(trainable, max_norm)))
            lr = current_lr(run.optimizer)  # the rate this update runs at
            run.optimizer.step()
            run.scheduler.step()
            run.optimizer.zero_grad(set_to_none=True)
            stats["ref_syncs"].append(sync_reference_when_due(run, start.step * config.num_iterations + iteration + 1))
    means = dist.mean(torch.tensor([sum(v) / len(v) for v in (stats["policy_loss"], stats["kl"], stats["clip_ratio"])]))
    entropy_totals = dist.sum(entropy_sums)
    ptx_metrics: dict[str, float] = {}
    if run.ptx is not None:
        ptx_sum = dist.sum(ptx_totals)
        ptx_metrics["loss/ptx"] = float(ptx_sum[0] / max(float(ptx_sum[1]), 1.0))
    return {
        "loss/policy": float(means[0]),
        "loss/kl": float(means[1]),
        "policy/clip_ratio": float(means[2]),
        "policy/entropy": float(entropy_totals[0] / max(float(entropy_totals[1]), 1.0)),
        "policy/entropy_trained": float(entropy_totals[2] / max(float(entropy_totals[3]), 1.0)),
        "optim/grad_norm": sum(stats["grad_norm"]) / len(stats["grad_norm"]),  # the same on every rank
        "optim/lr": lr,
        "ref/synced": float(sum(stats["ref_syncs"])),
        **({"optim/grad_cosine": stats["grad_cosine"][0]} if stats["grad_cosine"] else {}),
        **correction.metrics(),
        **ptx_metrics,
    }


def dist_gather(dist: Distributed) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """A gather of 1-D tensors of any length over ranks, for :func:`high_entropy_mask` (``None`` on one process):
    each rank's is padded to the longest with a value the mask drops, as TRL pads across processes."""
    if not dist.is_distributed:
        return None

    def gather(local: torch.Tensor) -> torch.Tensor:
        length = int(dist.gather(torch.tensor([local.numel()])).max())
        return dist.gather(pad_for_gather(local, length))

    return gather


def sync_reference_when_due(run: Run, updates_done: int) -> float:
    """After optimizer update number ``updates_done`` (1-based, over the run): :func:`sync_reference` when
    ``sync_ref_model`` is on and ``ref_model_sync_steps`` divides it. Returns 1.0 when it synced, else 0.0."""
    config = run.config
    if not (config.sync_ref_model and updates_done % config.ref_model_sync_steps == 0):
        return 0.0
    sync_reference(run)
    return 1.0


@torch.no_grad()
def sync_reference(run: Run) -> None:
    """TRL's reference sync (``SyncRefModelCallback``; DeepSeekMath's iterative RL with alpha 1): every reference
    weight becomes ``alpha * policy + (1 - alpha) * reference``, ``alpha = ref_model_mixup_alpha``.

    Every rank does it on its own copy (or, under FSDP, its own shard of both), so the ranks' references stay equal.
    """
    assert run.ref_model is not None  # config validation: sync_ref_model needs beta > 0 and no LoRA
    alpha = run.config.ref_model_mixup_alpha
    for ref_p, p in zip(run.ref_model.parameters(), run.model.parameters(), strict=True):
        ref_p.mul_(1.0 - alpha).add_(p.detach().to(ref_p.dtype), alpha=alpha)
    run.ref_synced = True


def step_metrics(
    dist: Distributed,
    config: GRPOConfig,
    start: StepStart,
    rollouts: Rollouts,
    scored: Scored,
    adv: Advantages,
    stats: dict[str, float],
) -> dict[str, Any]:
    """Phase 6a: the step's metrics row over all ranks (rewards, lengths, the update's statistics, timings)."""
    timer = start.timer
    results = dist.gather_objects(scored.results)
    rewards = dist.gather(scored.rewards)  # (B * G,)
    group_ids = dist.gather(rollouts.group_ids.cpu())  # (B * G,)
    lengths = dist.gather(rollouts.batch.completion_lengths.float().cpu())  # (B * G,)
    truncated = dist.gather(rollouts.batch.is_truncated.float().cpu())  # (B * G,)
    step_s = time.perf_counter() - start.started_s
    scored_rewards = rewards[~torch.isnan(rewards)]
    return {
        **reward_metrics(results, "reward"),
        "reward/std": float(scored_rewards.std()) if scored_rewards.numel() > 1 else 0.0,
        "adv/frac_zero_std_groups": frac_zero_std_groups(rewards, group_ids),
        **{
            k: stats[k]
            for k in ("loss/policy", "loss/kl", "policy/clip_ratio", "policy/entropy", "policy/entropy_trained")
        },
        "completions/mean_length": float(lengths.mean()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(truncated.mean()),
        "optim/lr": stats["optim/lr"],
        "optim/grad_norm": stats["optim/grad_norm"],
        **{k: stats[k] for k in ("optim/grad_cosine", "loss/ptx") if k in stats},
        **({"ref/synced": stats["ref/synced"]} if config.sync_ref_model else {}),
        **rollouts.metrics,
        **{k: v for k, v in stats.items() if k.startswith("rollout/")},
        **timer.as_metrics(),
        "timing/step": step_s,
        "timing/reward_wait_frac": timer.seconds["reward_wait"] / step_s,
        "perf/tokens_per_s": float(lengths.sum()) / step_s,
        **adv.metrics,
    }


def end_step(run: Run, start: StepStart, row: dict[str, Any]) -> None:
    """Phase 6b: evaluate when due, log the row, checkpoint when due."""
    config = run.config
    done = start.step + 1
    is_last = done == config.max_steps
    if run.eval_rows and (is_last or (config.eval_steps and done % config.eval_steps == 0)):
        with start.timer("eval"):
            length = config.completion_length_at(start.step)
            row.update(
                evaluate(run.backend, run.eval_rows, run.scorer, config, f"{run.run_name}-eval{done}", run.dist, length)
            )
        row["timing/eval"] = start.timer.seconds["eval"]
        if run.dist.is_main:
            logger.info("step %d: eval pass@1 %.3f", done, row["eval/pass@1"])
    log_metrics(run, done, row)
    if is_last or (config.save_steps and done % config.save_steps == 0):
        save(run, done)


def log_metrics(run: Run, step: int, row: dict[str, Any]) -> None:
    """Record ``row`` for ``step`` in the history and, on the main process, in the metrics file."""
    if run.metrics_log is not None:
        run.metrics_log.log(step, row)
    run.history.append({"step": step, **row})


def save(run: Run, step: int, rng: dict[str, Any] | None = None) -> Path:
    """Write ``checkpoint-<step>`` (see :func:`trainer.checkpoint.save_checkpoint`); with LoRA, the adapter.

    With several processes every rank takes part (FSDP gathers the weights and the optimizer state; each rank's
    RNG state is stored), rank 0 writes, and all wait until it has.
    """
    return save_on_ranks(
        run.dist,
        run.output_dir,
        step,
        model=run.model,  # a transformers or peft model: both save_pretrained
        optimizer=run.optimizer,
        rng=rng,
        ref_model=run.ref_model if run.ref_synced else None,
        tokenizer=run.tokenizer,
        scheduler=run.scheduler,
        config=run.config.to_dict(),
        save_total_limit=run.config.save_total_limit,
        loop_state={"prompt_cursor": run.prompt_cursor},
    )


def _wait_or_stop(
    run: Run, futures: Sequence[Future[list[RewardResult]]], start: StepStart
) -> tuple[list[RewardResult], float]:
    """``scorer.wait``; when the rewards fail for good (on any rank), save what a resume needs and stop the run."""
    error: RewardServerError | None = None
    try:
        out = run.scorer.wait(futures)
    except RewardServerError as exc:
        error = exc
    if run.dist.any(error is not None):
        # Nothing of this step has touched the weights or the optimizer yet: save the state as it was when the
        # step began (its RNG included), so a resume redoes this step exactly.
        resume_point = save(run, start.step, start.rng) if start.step > run.start_step else run.checkpoint
        error = error or RewardServerError("the rewards of another process failed (its log says why)")
        raise _stopped_for_rewards(error, start.step, resume_point) from error
    return out


# ------------------------------------------------------------------------------------------------------------- train


def train(config: GRPOConfig, *, scorer: RewardScorer | None = None) -> TrainResult:
    """Run GRPO as ``config`` says and return where the results are.

    Started by ``torchrun`` or ``accelerate launch``, every process runs this; they share the work as
    :mod:`trainer.distributed` says, and rank 0 logs and writes the checkpoints.

    Args:
        config: the validated config.
        scorer: a :class:`RewardScorer` to use (tests inject one over a mock transport); by default one is built
            from ``config.reward_server_urls`` and closed at the end.

    Raises:
        rlvr_client.client.RewardServerError: the reward server refused a batch or stayed unreachable.
        trainer.data.DataError: unusable data.
        FileNotFoundError: ``resume_from_checkpoint`` names no checkpoint.
    """
    dist = Distributed.from_env(cuda=wants_cuda(config), fsdp=config.fsdp)
    if not dist.is_main:
        logger.setLevel(logging.WARNING)  # one process says how the run goes
    own_scorer = scorer is None  # built by setup, closed here
    try:
        run = setup(config, dist, scorer)
    except BaseException:
        dist.close()
        raise
    bar = tqdm(
        total=config.max_steps, initial=run.start_step, disable=not (config.progress_bar and dist.is_main), desc="grpo"
    )
    try:
        if run.eval_rows and run.start_step == 0:
            length = config.completion_length_at(0)
            row = evaluate(run.backend, run.eval_rows, run.scorer, config, f"{run.run_name}-eval0", dist, length)
            log_metrics(run, 0, row)
            logger.info("step 0: eval pass@1 %.3f", row["eval/pass@1"])
        for step in range(run.start_step, config.max_steps):
            start = StepStart(step=step, rng=rng_state(), timer=PhaseTimer(), started_s=time.perf_counter())
            reset_tool_stats(run.backend)  # tools/* count this step's rollouts, not the last evaluation's
            rollouts = sample(run, start)  # 1. completions; each chunk's rewards already requested
            if config.dynamic_sampling:  # 1b. DAPO: only groups whose rewards differ, sampling more to fill
                rollouts = keep_informative_groups(run, start, rollouts)
            run.backend.sleep()  # the sampler's memory is free for the update (vLLM sleep mode)
            ref_logps = ref_log_probs(run, rollouts.batch, start.timer)  # 2. while scoring
            scored = score(run, rollouts, start)  # 3. wait for the rewards
            adv = compute_advantages(run, rollouts, scored)  # 4. advantages, loss mask
            stats = update(run, start, rollouts.batch, adv, ref_logps)  # 5. optimizer steps
            run.prompt_cursor += rollouts.prompts_drawn
            with start.timer("weight_sync"):  # 5b. the sampler takes the new weights (vLLM; nothing otherwise)
                stats |= run.backend.sync_weights()
            row = step_metrics(dist, config, start, rollouts, scored, adv, stats)  # 6. log, evaluate, checkpoint
            row |= tool_metrics(run.backend, dist)
            end_step(run, start, row)
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward/mean']:.3f}", kl=f"{row['loss/kl']:.4f}")
    finally:
        bar.close()
        run.backend.close()
        if run.metrics_log is not None:
            run.metrics_log.close()
        if own_scorer:
            run.scorer.close()
        dist.close()
    final = run.output_dir / f"checkpoint-{config.max_steps}"
    if run.checkpoint is not None and run.start_step == config.max_steps:  # resumed a finished run: nothing trained
        final = run.checkpoint
    return TrainResult(output_dir=run.output_dir, checkpoint=final, history=run.history)


def _stopped_for_rewards(exc: RewardServerError, step: int, resume_point: Path | None) -> RewardServerError:
    """The error that ends a run whose rewards failed at ``step``: what failed, and where to resume from."""
    refused = exc.status_code is not None and 400 <= exc.status_code < 500 and exc.status_code != 429
    # A 4xx is the request's fault (a row's components, tests or ground truth): waiting for the server fixes nothing.
    when = "once the data or reward config named above is fixed" if refused else "once the server is back"
    where = (
        f"the state before it is in {resume_point}: {when}, resume with --set resume_from_checkpoint={resume_point}"
        if resume_point is not None
        else "no step had finished, so there is nothing to resume from"
    )
    message = f"{exc}. Training stopped at step {step}; {where}"
    return RewardServerError(message, status_code=exc.status_code, url=exc.url)
