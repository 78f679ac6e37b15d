"""The GRPO training loop, to be read top to bottom.

One step: (1) sample ``num_generations`` completions for each of ``prompt_batch_size`` prompts, sending each
finished chunk of groups to the reward server at once; (2) old-policy and reference log-probs, computed while
the last chunk is being scored; (3) wait for the rewards and turn them into group advantages; (4) update the
policy ``num_iterations`` times, with gradient accumulation and clipping; (5) log, evaluate, checkpoint.

The math is in :mod:`trainer.grpo` (DeepSeekMath arXiv 2402.03300, DAPO 2503.14476, Dr. GRPO 2503.20783);
rewards come only over HTTP (:mod:`trainer.reward_client`); generation sits behind
:class:`trainer.rollout.GenerationBackend`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    get_scheduler,
)

from reward_server.client import RewardResult, RewardServerError
from trainer.checkpoint import load_training_state, resolve_checkpoint, rng_state, save_checkpoint
from trainer.config import ConfigError, GRPOConfig
from trainer.data import DataError, load_rows, prompt_indices, reward_items
from trainer.grpo import frac_zero_std_groups, group_advantages, grpo_loss
from trainer.metrics import MetricsLogger, PhaseTimer
from trainer.reward_client import RewardScorer
from trainer.rollout import (
    GenerationBackend,
    PromptEncoder,
    RolloutBatch,
    SamplingParams,
    TransformersBackend,
    completion_log_probs,
)

logger = logging.getLogger("trainer")


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        output_dir: the run directory (``metrics.jsonl``, TensorBoard events, checkpoints).
        checkpoint: the final checkpoint (Hugging Face format).
        history: every logged metrics row of this process, in order.
    """

    output_dir: Path
    checkpoint: Path
    history: list[dict[str, Any]]


# ---------------------------------------------------------------------------------------------------------- helpers


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _disable_dropout(model: torch.nn.Module) -> None:
    """Dropout would make two forwards of the same tokens disagree, so ``ratio != 1`` and ``KL != 0`` by noise."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)


def _load_model(
    path: str, device: torch.device, disable_dropout: bool, option: str = "model_name_or_path"
) -> PreTrainedModel:
    # Master weights stay float32; on GPU the forward runs under bf16 autocast.
    try:
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as exc:  # no such directory or hub id; not a causal LM
        raise ConfigError(f"{option}={path!r}: cannot load a causal LM from it ({_first_line(exc)})") from exc
    model.to(device)  # type: ignore[arg-type]  # transformers types .to() for dtypes only
    if disable_dropout:
        _disable_dropout(model)
    return model


def _first_line(exc: BaseException) -> str:
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _load_tokenizer(config: GRPOConfig) -> PreTrainedTokenizerBase:
    option = "tokenizer_name_or_path" if config.tokenizer_name_or_path else "model_name_or_path"
    path = config.tokenizer_name_or_path or config.model_name_or_path
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{option}={path!r}: cannot load a tokenizer from it ({_first_line(exc)})") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _check_prompts(
    encoder: PromptEncoder, rows: Sequence[dict[str, Any]], column: str, source: str, max_length: int | None
) -> None:
    """Render and tokenise every prompt once before training, so a prompt the chat template refuses, or one that
    gives no token, fails now with its row number rather than mid-run; warn about prompts that lose their start
    to ``max_prompt_length``.

    Raises:
        DataError: a prompt that cannot be rendered or that gives no token.
    """
    too_long = 0
    for i, row in enumerate(rows):
        try:
            n = encoder.prompt_length(row[column])
        except (ValueError, TypeError, jinja2.TemplateError) as exc:
            raise DataError(f"{source} row {i}: the prompt cannot be rendered: {_first_line(exc)}") from exc
        if n == 0:
            raise DataError(f"{source} row {i}: the prompt gives no token")
        too_long += max_length is not None and n > max_length
    if too_long:
        logger.warning(
            "%s: %d of %d prompts are longer than max_prompt_length=%s tokens; their start is cut (raise "
            "max_prompt_length or set it to null to keep them whole)",
            source,
            too_long,
            len(rows),
            max_length,
        )


def _micro_batches(n: int, gradient_accumulation_steps: int) -> list[slice]:
    size = n // gradient_accumulation_steps
    return [slice(i * size, (i + 1) * size) for i in range(gradient_accumulation_steps)]


@torch.no_grad()
def _log_probs_per_micro_batch(
    model: PreTrainedModel, batch: RolloutBatch, slices: Sequence[slice], temperature: float, autocast: Any
) -> list[torch.Tensor]:
    """Log-probs of each micro-batch under ``model`` without grad: old-policy or reference log-probs."""
    out = []
    for rows in slices:
        with autocast():
            logp, _ = completion_log_probs(model, batch.select(rows), temperature)
        out.append(logp.float())
    return out


def _nanmean(values: Sequence[float | None]) -> float:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


def _reward_metrics(results: Sequence[RewardResult], prefix: str) -> dict[str, float]:
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
) -> dict[str, float]:
    """pass@1 on held-out prompts, scored by the same reward server as training.

    pass@1 is the mean ``accuracy`` component score (1 for a correct answer, 0 otherwise) over all scoreable
    completions, ``eval_num_generations`` per prompt (the unbiased pass@1 estimate c/n of Chen et al. 2021,
    averaged over prompts); where the server reports no ``accuracy`` component the reward is used. Completions
    the server could not score are left out and counted in ``eval/frac_null``.
    """
    sampling = SamplingParams(
        max_new_tokens=config.max_completion_length,
        temperature=config.eval_temperature,
        top_p=config.top_p,
        top_k=config.top_k,
    )
    futures, lengths = [], []
    for lo in range(0, len(rows), config.eval_chunk_prompts):
        chunk_rows = rows[lo : lo + config.eval_chunk_prompts]
        batch = backend.generate([r[config.prompt_column] for r in chunk_rows], config.eval_num_generations, sampling)
        items = reward_items(
            chunk_rows,
            batch.prompt_index.tolist(),
            batch.completion_texts,
            batch.completion_lengths.tolist(),
            f"{id_prefix}-c{lo}",
            config.prompt_column,
        )
        futures.append(scorer.submit(items))
        lengths.extend(batch.completion_lengths.tolist())
    results, _ = scorer.wait(futures)
    correct = [r.components["accuracy"].score if "accuracy" in r.components else r.reward for r in results]
    return {
        "eval/pass@1": _nanmean(correct),
        **_reward_metrics(results, "eval/reward"),
        "eval/mean_length": sum(lengths) / max(len(lengths), 1),
        "eval/num_prompts": float(len(rows)),
    }


# ------------------------------------------------------------------------------------------------------------- train


def train(config: GRPOConfig, *, scorer: RewardScorer | None = None) -> TrainResult:
    """Run GRPO as ``config`` says and return where the results are.

    Args:
        config: the validated config.
        scorer: a :class:`RewardScorer` to use (tests inject one over a mock transport); by default one is built
            from ``config.reward_server_urls`` and closed at the end.

    Raises:
        reward_server.client.RewardServerError: the reward server refused a batch or stayed unreachable.
        trainer.data.DataError: unusable data.
        FileNotFoundError: ``resume_from_checkpoint`` names no checkpoint.
    """
    # ---------------------------------------------------------------- setup
    if config.torch_num_threads is not None:
        torch.set_num_threads(config.torch_num_threads)
    want_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if want_cuda else "cpu")
    on_gpu = device.type == "cuda"
    use_bf16 = on_gpu and (config.bf16 if config.bf16 is not None else torch.cuda.is_bf16_supported())

    def autocast() -> contextlib.AbstractContextManager[Any]:
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    _seed_everything(config.seed)
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = (
        resolve_checkpoint(config.resume_from_checkpoint, output_dir) if config.resume_from_checkpoint else None
    )

    # Data and prompts are checked before any model loads: a bad row should not cost minutes of loading first.
    train_rows = load_rows(config.train_data, config.train_split, config.prompt_column)
    eval_rows = load_rows(config.eval_data, config.eval_split, config.prompt_column) if config.eval_data else []
    eval_rows = eval_rows[: config.eval_max_prompts] if config.eval_max_prompts else eval_rows
    tokenizer = _load_tokenizer(config)
    encoder = PromptEncoder(
        tokenizer, max_prompt_length=config.max_prompt_length, apply_chat_template=config.apply_chat_template
    )
    if not encoder.use_chat_template and any(
        isinstance(r[config.prompt_column], list) for r in (*train_rows, *eval_rows)
    ):  # fail now, not at the first batch that happens to hold a chat prompt
        raise DataError(
            "the data has chat-message prompts but the tokenizer has no chat_template (or apply_chat_template is "
            "off): give plain-text prompts, a tokenizer with a chat template, or set apply_chat_template: true"
        )
    _check_prompts(encoder, train_rows, config.prompt_column, config.train_data, config.max_prompt_length)
    if config.eval_data:
        _check_prompts(encoder, eval_rows, config.prompt_column, config.eval_data, config.max_prompt_length)

    model = _load_model(
        str(checkpoint or config.model_name_or_path),
        device,
        config.disable_dropout,
        "resume_from_checkpoint" if checkpoint else "model_name_or_path",
    )
    num_embeddings = int(model.config.vocab_size)
    if len(tokenizer) > num_embeddings:  # a token id past the embedding table fails mid-generation otherwise
        raise ConfigError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embedding table only {num_embeddings}: "
            "tokenizer_name_or_path does not belong to model_name_or_path"
        )
    model.train()  # from_pretrained returns eval mode; the backend switches to eval only while generating
    if on_gpu and config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # The reference is the policy's starting point, also after a resume; with beta == 0 it is never loaded.
    ref_model = None
    if config.beta > 0:
        ref_option = "ref_model_name_or_path" if config.ref_model_name_or_path else "model_name_or_path"
        ref_model = _load_model(config.ref_model_name_or_path or config.model_name_or_path, device, True, ref_option)
        ref_model.eval().requires_grad_(False)

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        weight_decay=config.weight_decay,
    )
    scheduler = get_scheduler(
        "constant_with_warmup" if config.lr_scheduler_type == "constant" else config.lr_scheduler_type,
        optimizer,
        num_warmup_steps=config.warmup_steps,
        num_training_steps=config.max_steps * config.num_iterations,
    )
    start_step = load_training_state(checkpoint, optimizer, scheduler) if checkpoint else 0
    if start_step > config.max_steps:
        raise ConfigError(
            f"max_steps={config.max_steps} but {checkpoint} is at step {start_step}: raise max_steps to train on"
        )

    backend = TransformersBackend(
        model, tokenizer, max_prompt_length=config.max_prompt_length, apply_chat_template=config.apply_chat_template
    )
    sampling = SamplingParams(
        max_new_tokens=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=config.top_k,
    )
    own_scorer = scorer is None
    if scorer is None:
        scorer = RewardScorer(
            config.reward_server_urls,
            components=config.reward_components,
            preset=config.reward_preset,
            timeout_s=config.reward_timeout_s,
            max_retries=config.reward_max_retries,
            api_key=config.reward_api_key,
        )
        scorer.wait_ready(config.reward_wait_ready_s)
    metrics_log = MetricsLogger(output_dir, tensorboard=config.report_to_tensorboard, resume_step=start_step)
    history: list[dict[str, Any]] = []
    run_name = output_dir.name or "run"
    G = config.num_generations
    micro = _micro_batches(config.completions_per_step, config.gradient_accumulation_steps)

    if eval_rows and start_step == 0:
        row = evaluate(backend, eval_rows, scorer, config, f"{run_name}-eval0")
        metrics_log.log(0, row)
        history.append({"step": 0, **row})
        logger.info("step 0: eval pass@1 %.3f", row["eval/pass@1"])

    def save_state(step: int, rng: dict[str, Any] | None = None) -> Path:
        return save_checkpoint(
            output_dir,
            step,
            model=model,
            tokenizer=tokenizer,
            optimizer=optimizer,
            scheduler=scheduler,
            config=config.to_dict(),
            save_total_limit=config.save_total_limit,
            rng=rng,
        )

    def wait_or_stop(
        futures: Sequence[Future[list[RewardResult]]], step: int, rng_at_start: dict[str, Any]
    ) -> tuple[list[RewardResult], float]:
        """``scorer.wait``; when the rewards fail for good, save what a resume needs and stop the run."""
        try:
            return scorer.wait(futures)
        except RewardServerError as exc:
            # Nothing of this step has touched the weights or the optimizer yet: save the state as it was when the
            # step began (its RNG included), so a resume redoes this step exactly.
            resume_point = save_state(step, rng_at_start) if step > start_step else checkpoint
            raise _stopped_for_rewards(exc, step, resume_point) from exc

    bar = tqdm(total=config.max_steps, initial=start_step, disable=not config.progress_bar, desc="grpo")
    try:
        for step in range(start_step, config.max_steps):
            rng_at_start = rng_state()  # stored if this step fails for want of rewards, see below
            timer = PhaseTimer()
            step_start = time.perf_counter()
            rows = [train_rows[i] for i in prompt_indices(step, config.prompt_batch_size, len(train_rows), config.seed)]
            prompts = [row[config.prompt_column] for row in rows]

            # 1. Sample G completions per prompt, one chunk of prompts at a time. A finished chunk goes to the
            #    reward server at once, so it is scored while the next chunk generates.
            chunks, futures = [], []
            for lo in range(0, len(prompts), config.chunk_prompts):
                with timer("generate"):
                    chunk = backend.generate(prompts[lo : lo + config.chunk_prompts], G, sampling)
                items = reward_items(
                    rows,
                    (chunk.prompt_index + lo).tolist(),
                    chunk.completion_texts,
                    chunk.completion_lengths.tolist(),
                    f"{run_name}-s{step}",
                    config.prompt_column,
                )
                futures.append(scorer.submit(items))
                chunks.append(chunk)
                if not config.overlap_scoring:  # the no-overlap baseline: block on this chunk's rewards now
                    timer.add("reward_wait", wait_or_stop(futures[-1:], step, rng_at_start)[1])
            batch = RolloutBatch.concat(chunks, backend.pad_token_id)  # (N = B * G rows)
            group_ids = batch.prompt_index  # (N,) explicit group ids: prompt i of this step is group i

            # 2. Old-policy log-probs (only when the batch is reused, num_iterations > 1; otherwise the ratio is
            #    taken against the detached current log-probs) and reference log-probs (only when beta > 0).
            #    They need no rewards, so they run while the last chunk is still being scored.
            with timer("logprobs"):
                old_logps = None
                if config.num_iterations > 1:
                    old_logps = _log_probs_per_micro_batch(model, batch, micro, config.temperature, autocast)
                ref_logps = None
                if ref_model is not None:
                    ref_logps = _log_probs_per_micro_batch(ref_model, batch, micro, config.temperature, autocast)

            # 3. Rewards -> group advantages. A null reward (NaN) is left out of its group's baseline and gets
            #    advantage 0: an infrastructure failure is not a wrong answer.
            results, wait_s = wait_or_stop(futures, step, rng_at_start)
            timer.add("reward_wait", wait_s)
            rewards = torch.tensor([math.nan if r.reward is None else r.reward for r in results])  # (N,)
            advantages = group_advantages(rewards, group_ids.cpu(), config.scale_rewards).to(device)  # (N,)
            loss_mask = batch.completion_mask.clone()  # (N, C)
            if config.mask_truncated_completions:
                loss_mask[batch.is_truncated] = 0
            num_items_in_batch = loss_mask.sum()  # completion tokens of the whole batch (dapo's normaliser)

            # 4. Update: num_iterations optimizer steps on this batch, each accumulating gradient over the
            #    micro-batches, then clipping the global norm.
            stats: dict[str, list[float]] = defaultdict(list)
            entropy_sum, entropy_tokens = 0.0, 0.0
            with timer("update"):
                for iteration in range(config.num_iterations):
                    policy_loss = 0.0
                    for k, rows_k in enumerate(micro):
                        mb = batch.select(rows_k)
                        width = mb.completion_ids.shape[1]
                        with autocast():
                            logp, entropy = completion_log_probs(
                                model, mb, config.temperature, with_entropy=iteration == 0
                            )  # (b, c)
                        mask_k = loss_mask[rows_k][:, :width]  # (b, c)
                        out = grpo_loss(
                            logp.float(),
                            old_logps[k] if old_logps is not None else logp.detach().float(),
                            advantages[rows_k],
                            mask_k,
                            loss_type=config.loss_type,
                            epsilon=config.epsilon,
                            epsilon_high=config.epsilon_high,
                            beta=config.beta,
                            ref_logp=ref_logps[k] if ref_logps is not None else None,
                            max_completion_length=config.max_completion_length,
                            num_items_in_batch=num_items_in_batch,
                            gradient_accumulation_steps=config.gradient_accumulation_steps,
                        )
                        out.loss.backward()
                        policy_loss += out.policy_loss.item()
                        stats["kl"].append(out.kl.item())
                        stats["clip_ratio"].append(out.clip_ratio.item())
                        if entropy is not None:
                            m = mb.completion_mask.to(entropy.dtype)
                            entropy_sum += float((entropy * m).sum())
                            entropy_tokens += float(m.sum())
                    stats["policy_loss"].append(policy_loss)
                    max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
                    stats["grad_norm"].append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad(set_to_none=True)

            # 5. Log, evaluate, checkpoint.
            step_s = time.perf_counter() - step_start
            lengths = batch.completion_lengths.float()
            row = {
                **_reward_metrics(results, "reward"),
                "reward/std": float(scored.std()) if (scored := rewards[~torch.isnan(rewards)]).numel() > 1 else 0.0,
                "adv/frac_zero_std_groups": frac_zero_std_groups(rewards, group_ids.cpu()),
                "loss/policy": sum(stats["policy_loss"]) / len(stats["policy_loss"]),
                "loss/kl": sum(stats["kl"]) / len(stats["kl"]),
                "policy/clip_ratio": sum(stats["clip_ratio"]) / len(stats["clip_ratio"]),
                "policy/entropy": entropy_sum / max(entropy_tokens, 1.0),
                "completions/mean_length": float(lengths.mean()),
                "completions/max_length": float(lengths.max()),
                "completions/clipped_ratio": float(batch.is_truncated.float().mean()),
                "optim/lr": scheduler.get_last_lr()[0],
                "optim/grad_norm": sum(stats["grad_norm"]) / len(stats["grad_norm"]),
                **timer.as_metrics(),
                "timing/step": step_s,
                "timing/reward_wait_frac": timer.seconds["reward_wait"] / step_s,
                "perf/tokens_per_s": float(lengths.sum()) / step_s,
            }
            done = step + 1
            is_last = done == config.max_steps
            if eval_rows and (is_last or (config.eval_steps and done % config.eval_steps == 0)):
                with timer("eval"):
                    row.update(evaluate(backend, eval_rows, scorer, config, f"{run_name}-eval{done}"))
                row["timing/eval"] = timer.seconds["eval"]
            metrics_log.log(done, row)
            history.append({"step": done, **row})
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward/mean']:.3f}", kl=f"{row['loss/kl']:.4f}")
            if is_last or (config.save_steps and done % config.save_steps == 0):
                save_state(done)
    finally:
        bar.close()
        metrics_log.close()
        if own_scorer:
            scorer.close()
    final = output_dir / f"checkpoint-{config.max_steps}"
    if checkpoint is not None and start_step == config.max_steps:  # resumed a finished run: nothing was trained
        final = checkpoint
    return TrainResult(output_dir=output_dir, checkpoint=final, history=history)


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
