"""Rollouts with vLLM, colocated with the trainer: the one module that imports vLLM.

:class:`VLLMBackend` is a :class:`trainer.rollout.base.GenerationBackend`. It runs a vLLM engine *in the trainer's own
process* (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, one uni-process executor on the trainer's device), which is TRL's
``vllm_mode: colocate``. After every optimizer step :meth:`VLLMBackend.sync_weights` hands the policy's tensors to
vLLM's supported in-place update, ``LLM.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})``
(``vllm/model_executor/model_loader/reload``: every layer is put back in checkpoint form, loaded, and its
``process_weights_after_loading`` re-run, so kernels that keep a repacked copy of a weight get a new one). The
tensors are passed by reference: no restart, no file, no copy beyond the one into vLLM's own parameters.

**The proof.** After every sync the engine scores a fixed prompt (``prompt_logprobs``) and the policy scores the same
tokens; the largest per-token log-prob difference is returned as ``rollout/weight_sync_logprob_diff`` and, when the
engine runs in float32, a difference above ``sync_tolerance`` raises :class:`WeightSyncError`. A stale layer shows
up as a difference of order 0.1-1; a synced float32 engine is within 1e-6 on the tiny test models.

**Why the tied head is passed explicitly.** vLLM's CPU build prepacks every linear weight (oneDNN or its own
"sgl" kernel layout) and keeps the packed copy in a closure; the tied LM head gets a packed copy of the embedding
matrix. ``model.named_parameters()`` lists a tied weight once (as the embedding), so a reload never reaches the
head layer: the embedding and norms follow, the head's packed copy stays stale (vLLM logs "ParallelLMHead: Failed to
load weights"), and greedy tokens and log-probs then differ from ``transformers``. The weights are therefore listed
with ``remove_duplicate=False``, which names the head too. On CUDA, unquantized linear layers are not repacked and
the head shares the embedding's storage, so the extra entry is a harmless second copy into the same memory.

**Sleep mode** (``vllm_enable_sleep_mode``, CUDA only in vLLM 0.32): after a step's sampling the engine sleeps at
level 2 (KV cache and weights released: they are replaced at the next sync anyway); :meth:`sync_weights` wakes the
weights, loads the new ones, then wakes the KV cache. vLLM's CPU platform has no sleep mode: asking for it there is
refused when the backend is built.

Shapes: ``N`` completions, ``P`` prompt tokens (left-padded), ``C`` completion tokens (right-padded).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.rollout.base import (
    Continuation,
    Prompt,
    PromptEncoder,
    RolloutBatch,
    SamplingParams,
    SavedModel,
    StopCondition,
    decode_completions,
    eos_token_ids,
)

logger = logging.getLogger("trainer")

# The engine must live in this process for the weights to be handed over by reference (and for collective_rpc to
# take a Python iterator); vLLM reads these when the engine is built. Quiet INFO logs unless the user asks for them.
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import vllm  # noqa: E402  # after the environment above
from vllm.inputs import TokensPrompt  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

WeightSource = Callable[[], Iterable[tuple[str, torch.Tensor]]]
"""Yields the policy's ``(name, tensor)`` pairs in Hugging Face checkpoint names (merged weights under LoRA)."""


class WeightSyncError(RuntimeError):
    """After a sync the engine's log-probs of the probe prompt differ from the policy's by more than the tolerance."""


@dataclass(frozen=True)
class EngineOptions:
    """How the engine is built.

    Attributes:
        model_path: the checkpoint vLLM reads the architecture and tokenizer from (the weights are replaced by the
            policy's at the first :meth:`VLLMBackend.sync_weights`).
        dtype: ``float32`` or ``bfloat16``: the dtype of the update's log-probs.
        seed: the engine's seed (each ``generate`` call also seeds its requests from torch's RNG).
        max_model_len: longest prompt + completion, in tokens.
        max_batch_rows: most completions one ``generate`` call asks for (sizes the CPU KV cache).
        gpu_memory_utilization: share of GPU memory the engine may take (CUDA; TRL's
            ``vllm_gpu_memory_utilization``).
        enable_sleep_mode: release the engine's memory while the policy updates (CUDA only).
        enforce_eager: no torch.compile / CUDA graphs; ``None`` means eager on CPU (compiling the tiny models
            costs ~30-80 s and gains nothing), graphs on CUDA.
    """

    model_path: str
    dtype: str = "float32"
    seed: int = 0
    max_model_len: int | None = None
    max_batch_rows: int = 64
    gpu_memory_utilization: float = 0.3
    enable_sleep_mode: bool = False
    enforce_eager: bool | None = None


class VLLMBackend:
    """Colocated vLLM generation with an in-memory weight sync after every optimizer step, and its proof.

    Args:
        model: the policy (its weights are what the engine samples with after each :meth:`sync_weights`), or
            ``None`` to sample the checkpoint at ``options.model_path`` as the engine loaded it (rejection
            sampling: nothing to sync, and no trainer-side copy of the weights in memory).
        tokenizer: the policy's tokenizer; prompts are tokenised here, exactly as :class:`TransformersBackend`
            does, and handed to vLLM as token ids.
        options: how to build the engine.
        max_prompt_length, apply_chat_template: see :class:`trainer.rollout.base.PromptEncoder`.
        probe_prompt: the fixed prompt whose log-probs prove each sync (at least 2 tokens once encoded).
        sync_tolerance: largest per-token log-prob difference allowed after a sync in float32; ``None`` skips
            the check.
        weights: what to sync; by default the policy's parameters, tied ones under each of their names.

    Raises:
        ValueError: sleep mode on a platform without it, a probe prompt of fewer than 2 tokens, or a probe prompt
            without a model.
    """

    def __init__(
        self,
        model: PreTrainedModel | None,
        tokenizer: PreTrainedTokenizerBase,
        options: EngineOptions,
        *,
        max_prompt_length: int | None = None,
        apply_chat_template: bool = True,
        probe_prompt: Prompt | None = None,
        sync_tolerance: float | None = 1e-3,
        weights: WeightSource | None = None,
    ) -> None:
        if options.enable_sleep_mode and not current_platform.is_sleep_mode_available():
            raise ValueError(
                f"vllm_enable_sleep_mode: vLLM {vllm.__version__} has no sleep mode on this platform "
                f"({current_platform.device_type}); set vllm_enable_sleep_mode: false"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.options = options
        self.prompts = PromptEncoder(
            tokenizer, max_prompt_length=max_prompt_length, apply_chat_template=apply_chat_template
        )
        self.pad_token_id = self.prompts.pad_token_id
        self.eos_token_ids = eos_token_ids(model if model is not None else SavedModel(options.model_path), tokenizer)
        self._device = next(model.parameters()).device if model is not None else torch.device("cpu")
        self.sync_tolerance = sync_tolerance
        self._weights: WeightSource | None = weights or (None if model is None else (lambda: _named_tensors(model)))
        self._probe_ids: list[int] | None = None
        if probe_prompt is not None:
            if model is None:
                raise ValueError("a probe prompt proves a sync of the policy's weights: give the model too")
            self._probe_ids = self.prompts.token_ids(probe_prompt)[-(max_prompt_length or 10**9) :]
            if len(self._probe_ids) < 2:
                raise ValueError("the probe prompt must give at least 2 tokens (its first token has no log-prob)")
        self._asleep = False
        start = time.perf_counter()
        self.llm = _build_engine(options)
        self.engine_start_s = time.perf_counter() - start

    # ---------------------------------------------------------------------------------------------- generation

    def generate(self, prompts: Sequence[Prompt], num_generations: int, sampling: SamplingParams) -> RolloutBatch:
        """Sample ``num_generations`` completions of each prompt (see :class:`trainer.rollout.base.GenerationBackend`).

        Each call draws one seed from torch's global RNG and gives request ``i`` the seed ``seed + i * G`` (vLLM
        gives its ``G`` samples ``+ 0 .. G-1``), so a run seeded the same way, and a resume that restores torch's
        RNG, samples the same completions. ``sampling_log_probs`` are vLLM's ``processed_logprobs`` (after
        temperature, top-k and top-p), TRL's choice for the importance-sampling correction.
        """
        if self._asleep:  # the engine's weights were released: the policy's are the ones to sample with
            self.sync_weights()
        device = self._device
        ids, mask = self.prompts.encode(prompts)  # (n, P)
        seed = int(torch.randint(0, 2**31 - 1 - len(prompts) * num_generations, ()).item())
        requests = [TokensPrompt(prompt_token_ids=row[m.bool()].tolist()) for row, m in zip(ids, mask, strict=True)]
        params = [
            _sampling_params(sampling, num_generations, self.eos_token_ids, seed + i * num_generations)
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completions = [o for out in outputs for o in sorted(out.outputs, key=lambda c: c.index)]
        n, width = len(completions), max(1, max(len(c.token_ids) for c in completions))
        completion_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)  # (N, C)
        completion_mask = torch.zeros((n, width), dtype=torch.long)  # (N, C)
        sampling_logp = torch.zeros((n, width), dtype=torch.float32)  # (N, C)
        is_truncated = torch.zeros(n, dtype=torch.bool)  # (N,)
        for row, c in enumerate(completions):
            tokens = list(c.token_ids)
            completion_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            completion_mask[row, : len(tokens)] = 1
            # vLLM stops at the first EOS and keeps it, so a row is truncated exactly when it does not end in one.
            is_truncated[row] = not tokens or tokens[-1] not in self.eos_token_ids
            if c.logprobs is not None:
                sampling_logp[row, : len(tokens)] = torch.tensor(
                    [step[t].logprob for step, t in zip(c.logprobs, tokens, strict=True)]
                )
        return RolloutBatch(
            prompt_ids=ids.repeat_interleave(num_generations, 0).to(device),
            prompt_mask=mask.repeat_interleave(num_generations, 0).to(device),
            completion_ids=completion_ids.to(device),
            completion_mask=completion_mask.to(device),
            is_truncated=is_truncated.to(device),
            prompt_index=torch.arange(len(prompts), device=device).repeat_interleave(num_generations),
            completion_texts=decode_completions(self.tokenizer, completion_ids, completion_mask),
            sampling_log_probs=sampling_logp.to(device),
        )

    def continue_rows(
        self, prefixes: Sequence[Sequence[int]], sampling: SamplingParams, budgets: Sequence[int], stop: StopCondition
    ) -> list[Continuation]:
        """Continue each token prefix by at most ``budgets[i]`` tokens, stopping at EOS or at one of
        ``stop.stop_strings`` (kept in the output), for the tool loop of :mod:`trainer.tools.rollout`.

        The prefixes go in as prompt token ids, so the engine's prefix cache (on by default in vLLM's V1 engine for
        generative models) reuses the KV blocks of the prompt and of the turns before: a turn costs only its new
        tokens. Seeds are drawn as in :meth:`generate`. A stop string ends a turn whether or not a call is complete;
        the loop continues such a row.
        """
        if self._asleep:
            self.sync_weights()
        seed = int(torch.randint(0, 2**31 - 1 - len(prefixes), ()).item())
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prefixes]
        params = [
            _sampling_params(
                dataclasses.replace(sampling, max_new_tokens=max(1, b)),
                1,
                self.eos_token_ids,
                seed + i,
                stop=stop.stop_strings,
            )
            for i, b in enumerate(budgets)
        ]
        result = []
        for out in self.llm.generate(requests, params, use_tqdm=False):
            c = out.outputs[0]
            tokens = list(c.token_ids)
            log_probs = None
            if c.logprobs is not None:
                log_probs = [step[t].logprob for step, t in zip(c.logprobs, tokens, strict=True)]
            ended = bool(tokens) and tokens[-1] in self.eos_token_ids
            result.append(Continuation(token_ids=tokens, ended_with_eos=ended, log_probs=log_probs))
        return result

    # -------------------------------------------------------------------------------------------- weight sync

    @torch.no_grad()
    def sync_weights(self) -> dict[str, float]:
        """Load the policy's current weights into the engine in place, then prove it (see the module docstring).

        Returns:
            ``rollout/weight_sync_logprob_diff`` (largest per-token log-prob difference on the probe prompt, nats)
            when a probe prompt was given; else nothing (also when built without a model: nothing to sync).

        Raises:
            WeightSyncError: a float32 engine differs from the policy by more than ``sync_tolerance``.
        """
        if self._weights is None:
            return {}
        if self._asleep:
            self.llm.wake_up(tags=["weights"])  # memory back for the weights; their values come next
        weights = [(name, tensor.detach()) for name, tensor in self._weights()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        del weights
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        metrics: dict[str, float] = {}
        if self._probe_ids is not None:
            diff = self.weight_sync_logprob_diff()
            metrics["rollout/weight_sync_logprob_diff"] = diff
            if self.sync_tolerance is not None and self.options.dtype == "float32" and diff > self.sync_tolerance:
                raise WeightSyncError(
                    f"after the weight sync vLLM's log-probs of the probe prompt differ from the policy's by up to "
                    f"{diff:.3g} nats (tolerance {self.sync_tolerance:g}): the engine does not sample with the "
                    "policy's weights"
                )
        return metrics

    @torch.no_grad()
    def weight_sync_logprob_diff(self) -> float:
        """Largest ``|log p_engine - log p_policy|`` over the probe prompt's tokens (nats).

        Raises:
            ValueError: the backend was built without a probe prompt.
        """
        if self._probe_ids is None:
            raise ValueError("no probe prompt: build the backend with probe_prompt=...")
        assert self.model is not None  # __init__ refuses a probe prompt without a model
        engine = self.prompt_log_probs(self._probe_ids)  # (L - 1,)
        policy = _policy_prompt_log_probs(self.model, self._probe_ids)  # (L - 1,)
        return float((engine - policy).abs().max())

    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """``(L - 1,)`` the engine's log-prob of each token of ``token_ids`` given those before it."""
        if self._asleep:
            self.sync_weights()
        params = vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        out = self.llm.generate([TokensPrompt(prompt_token_ids=list(token_ids))], params, use_tqdm=False)[0]
        assert out.prompt_logprobs is not None
        return torch.tensor(
            [out.prompt_logprobs[i][t].logprob for i, t in enumerate(token_ids) if i > 0], dtype=torch.float32
        )

    # ----------------------------------------------------------------------------------------------- memory

    def sleep(self) -> None:
        """With sleep mode: release the KV cache and the weights (level 2: the next sync replaces them anyway)
        until the next :meth:`sync_weights`; without it, or without a model to sync from, nothing. A ``generate``
        while asleep syncs first."""
        if self.options.enable_sleep_mode and not self._asleep and self._weights is not None:
            self.llm.sleep(level=2)
            self._asleep = True

    def close(self) -> None:
        """Shut the engine down and release vLLM's process-wide state, so another engine can start here."""
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        engine_core = getattr(self.llm.llm_engine, "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()
        del self.llm
        destroy_model_parallel()
        destroy_distributed_environment()


def _named_tensors(model: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    # remove_duplicate=False: a tied weight is listed under each name, so vLLM reloads the LM head too (see the
    # module docstring).
    return model.named_parameters(remove_duplicate=False)


def _sampling_params(sampling: SamplingParams, n: int, eos: Sequence[int], seed: int, stop: Sequence[str] = ()) -> Any:
    greedy = sampling.temperature <= 0
    return vllm.SamplingParams(
        n=n,
        max_tokens=sampling.max_new_tokens,
        temperature=0.0 if greedy else sampling.temperature,
        top_p=1.0 if greedy else sampling.top_p,
        top_k=0 if greedy else sampling.top_k,
        stop_token_ids=list(eos),
        repetition_penalty=1.0,
        seed=None if greedy else seed,
        logprobs=0,
        # Completions are decoded by our tokenizer, as the transformers backend does; stop strings need vLLM's own.
        detokenize=bool(stop),
        stop=list(stop) or None,
        include_stop_str_in_output=True,
    )


def _build_engine(options: EngineOptions) -> Any:
    on_cpu = current_platform.is_cpu()
    eager = options.enforce_eager if options.enforce_eager is not None else on_cpu
    kwargs: dict[str, Any] = {
        "model": options.model_path,
        "dtype": options.dtype,
        "seed": options.seed,
        "max_model_len": options.max_model_len,
        "enforce_eager": eager,
        "enable_sleep_mode": options.enable_sleep_mode,
        "distributed_executor_backend": "uni",
        # The sampler's knobs come from each request; the checkpoint's generation_config.json (Qwen's top_p=0.8 and
        # repetition penalty) must not fill in the ones a request leaves at their defaults.
        "generation_config": "vllm",
        # Log-probs after temperature/top-k/top-p, as TRL asks for them: the distribution that was sampled.
        "logprobs_mode": "processed_logprobs",
        "max_num_seqs": max(options.max_batch_rows, 1),
    }
    if on_cpu:
        # On CPU vLLM reads gpu_memory_utilization as a share of the host's memory; size the KV cache for the
        # batches this run asks for instead.
        kwargs["kv_cache_memory_bytes"] = _cpu_kv_cache_bytes(options)
    else:
        kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
    # The engine lives in the trainer's process, and building it reseeds Python's, NumPy's and torch's global RNGs
    # (vLLM's set_random_seed) and, on CPU, replaces torch.set_num_threads with a no-op: both are put back, so the
    # trainer's seeding (and a resumed run's restored RNG) is what it was.
    set_num_threads = torch.set_num_threads
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            return vllm.LLM(**kwargs)
    finally:
        torch.set_num_threads = set_num_threads
        random.setstate(py_state)
        np.random.set_state(np_state)


def _cpu_kv_cache_bytes(options: EngineOptions) -> int:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(options.model_path)
    text = getattr(config, "text_config", config)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    bytes_per_token = 2 * text.num_hidden_layers * kv_heads * head_dim * (4 if options.dtype == "float32" else 2)
    tokens = options.max_batch_rows * (options.max_model_len or text.max_position_embeddings)
    return max(32 * 2**20, math.ceil(1.25 * bytes_per_token * tokens))


@torch.no_grad()
def _policy_prompt_log_probs(model: PreTrainedModel, token_ids: Sequence[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], device=device)  # (1, L)
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()  # (L - 1, V)
    finally:
        model.train(was_training)
    logp = torch.log_softmax(logits, -1)
    return logp.gather(-1, ids[0, 1:, None])[:, 0].cpu()  # (L - 1,)


__all__ = ["EngineOptions", "VLLMBackend", "WeightSource", "WeightSyncError"]
