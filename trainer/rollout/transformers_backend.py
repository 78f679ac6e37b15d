"""Generation with the policy in ``transformers``: the default :class:`trainer.rollout.base.GenerationBackend`.

``generate`` samples with the decode loop of :mod:`trainer.rollout.decode` (the same tokens as ``model.generate``
for the same RNG state, with less per-token overhead) where the model's layers all attend to the whole sequence,
and with ``model.generate`` otherwise (sliding-window or non-attention layers, FSDP's ``synced_gpus``);
``continue_rows`` (tool turns) uses ``model.generate`` with its stopping criteria. Either samples with the policy
itself, so its completions need no sampler correction (:mod:`trainer.rollout.correction`) and its weights no sync.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria

from trainer.rollout.base import (
    Continuation,
    Prompt,
    PromptEncoder,
    RolloutBatch,
    SamplingParams,
    StopCondition,
    completion_mask_from_ids,
    decode_completions,
    eos_token_ids,
)
from trainer.rollout.decode import sample
from trainer.rollout.forward import cache_keyword, prefill, prompt_cache_applies
from trainer.rollout.kv_cache import decode_cache
from trainer.rollout.static_decode import StaticDecoder


class TransformersBackend:
    """Generation with the policy: left padding, KV cache, stops at EOS (see the module docstring).

    Args:
        model: the policy; generation runs in eval mode under ``torch.no_grad`` and restores the mode after.
        tokenizer: its ``pad_token`` (or EOS when it has none) pads.
        max_prompt_length, apply_chat_template: see :class:`PromptEncoder`.
        autocast: a context manager factory entered around ``generate``: the update's autocast (bf16 on CUDA),
            so that sampling draws from the distribution whose log-probs the loss computes.
        synced_gpus: keep every rank in ``generate`` until all have finished (needed when the policy is sharded
            with FSDP: each forward gathers the parameters with a collective).
        share_prompts: prefill each distinct prompt once and copy its KV cache to its ``num_generations`` rows
            (:meth:`generate`), where :func:`trainer.rollout.forward.prompt_cache_applies` and not with
            ``synced_gpus``; the same logits, so the same samples, with ``1/num_generations`` of the prompt work.
        cache_implementation: ``static``: :meth:`generate` decodes over a static KV cache, each token one CUDA
            graph replay on a GPU (:class:`trainer.rollout.static_decode.StaticDecoder`), where the shared prefill
            would apply; ``dynamic``: the appending cache.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_prompt_length: int | None = None,
        apply_chat_template: bool = True,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
        synced_gpus: bool = False,
        share_prompts: bool = True,
        cache_implementation: str = "dynamic",
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.autocast = autocast
        self.synced_gpus = synced_gpus
        self.share_prompts = share_prompts and not synced_gpus
        self.prompts = PromptEncoder(
            tokenizer, max_prompt_length=max_prompt_length, apply_chat_template=apply_chat_template
        )
        self.use_chat_template = self.prompts.use_chat_template
        self.pad_token_id = self.prompts.pad_token_id
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        if cache_implementation not in ("dynamic", "static"):
            raise ValueError(f"cache_implementation must be 'dynamic' or 'static', got {cache_implementation!r}")
        self.static = StaticDecoder(model) if cache_implementation == "static" and not synced_gpus else None

    def render(self, prompt: Prompt) -> str:
        """See :meth:`PromptEncoder.render`."""
        return self.prompts.render(prompt)

    def encode(self, prompts: Sequence[Prompt]) -> tuple[torch.Tensor, torch.Tensor]:
        """See :meth:`PromptEncoder.encode`."""
        return self.prompts.encode(prompts)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], num_generations: int, sampling: SamplingParams) -> RolloutBatch:
        """Sample ``num_generations`` completions of each prompt (see :class:`GenerationBackend`)."""
        device = next(self.model.parameters()).device
        prompt_ids, prompt_mask = (t.to(device) for t in self.encode(prompts))  # (n, P) each
        ids = prompt_ids.repeat_interleave(num_generations, 0)  # (N, P)
        mask = prompt_mask.repeat_interleave(num_generations, 0)  # (N, P)
        was_training = self.model.training
        self.model.eval()
        try:
            with self.autocast():
                if self.static is not None and prompt_cache_applies(self.model):
                    completion_ids = self.static.sample(
                        ids, mask, sampling, self.eos_token_ids, self.pad_token_id, self.prompts.max_prompt_length
                    )  # (N, C)
                elif not self.synced_gpus and prompt_cache_applies(self.model):
                    cache = self._prompt_cache(prompt_ids, prompt_mask, num_generations)
                    completion_ids = sample(
                        self.model, ids, mask, cache, sampling, self.eos_token_ids, self.pad_token_id
                    )  # (N, C)
                else:
                    out = self.model.generate(  # type: ignore[operator]
                        input_ids=ids,
                        attention_mask=mask,
                        generation_config=self._generation_config(sampling),
                        synced_gpus=self.synced_gpus,
                        **self._decode_cache(),
                    )  # (N, P + C)
                    completion_ids = out[:, ids.shape[1] :]  # (N, C)
        finally:
            self.model.train(was_training)
        completion_mask, is_truncated = completion_mask_from_ids(completion_ids, self.eos_token_ids)
        completion_ids = completion_ids.masked_fill(completion_mask == 0, self.pad_token_id)
        texts = decode_completions(self.tokenizer, completion_ids, completion_mask)
        return RolloutBatch(
            prompt_ids=ids,
            prompt_mask=mask,
            completion_ids=completion_ids,
            completion_mask=completion_mask,
            is_truncated=is_truncated,
            prompt_index=torch.arange(len(prompts), device=device).repeat_interleave(num_generations),
            completion_texts=texts,
        )

    def _prompt_cache(self, ids: torch.Tensor, mask: torch.Tensor, num_generations: int) -> DynamicCache:
        """The KV cache :func:`trainer.rollout.decode.sample` starts from, appending in place
        (:mod:`trainer.rollout.kv_cache`): for the ``(n, P)`` prompts, all but the last token of each, computed once
        per prompt and repeated ``num_generations`` times (the loop then feeds only the last prompt token, at the
        same position, and goes on as without it); an empty cache where sharing does not apply."""
        if not self.share_prompts or num_generations == 1 or ids.shape[1] < 2:
            return decode_cache()
        _, cache = prefill(self.model, ids[:, :-1], mask[:, :-1])
        cache.batch_repeat_interleave(num_generations)
        return decode_cache(cache)

    def _decode_cache(self) -> dict[str, Any]:
        """``generate``'s cache keyword and an empty cache that appends in place, for models whose layers all
        attend to the whole sequence; ``{}`` (``generate``'s own cache) otherwise."""
        return {cache_keyword(self.model): decode_cache()} if prompt_cache_applies(self.model) else {}

    @torch.no_grad()
    def continue_rows(
        self, prefixes: Sequence[Sequence[int]], sampling: SamplingParams, budgets: Sequence[int], stop: StopCondition
    ) -> list[Continuation]:
        """Continue each token prefix by at most ``budgets[i]`` tokens, stopping at EOS or at the end of a tool call
        (see :class:`trainer.rollout.base.GenerationBackend`).

        The prefixes are left-padded into one ``generate`` call, so positions are those that
        :func:`trainer.rollout.forward.completion_log_probs` recomputes; a row stops where ``stop.find_call`` sees a
        complete call in the text of this turn (checked when the last tokens hold the end of one of its
        ``stop_strings``), and its later tokens are dropped.
        """
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prefixes)
        ids = torch.full((len(prefixes), width), self.pad_token_id, dtype=torch.long)  # (n, W)
        mask = torch.zeros_like(ids)  # (n, W)
        for i, p in enumerate(prefixes):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = 1
        turn_stop = _TurnStop(self.tokenizer, stop, width, budgets)
        config = self._generation_config(dataclasses.replace(sampling, max_new_tokens=max(1, max(budgets))))
        was_training = self.model.training
        self.model.eval()
        try:
            with self.autocast():
                out = self.model.generate(  # type: ignore[operator]
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    generation_config=config,
                    stopping_criteria=[turn_stop],
                    synced_gpus=self.synced_gpus,
                    **self._decode_cache(),
                )  # (n, W + T)
        finally:
            self.model.train(was_training)
        result = []
        for i, row in enumerate(out[:, width:].tolist()):
            end = min(len(row), budgets[i], turn_stop.stopped_at.get(i, len(row)))
            eos = next((j for j, t in enumerate(row[:end]) if t in self.eos_token_ids), None)
            tokens = row[: eos + 1] if eos is not None else row[:end]
            result.append(Continuation(token_ids=tokens, ended_with_eos=eos is not None))
        return result

    def sync_weights(self) -> dict[str, float]:
        """Nothing to do: generation runs on the policy itself."""
        return {}

    def sleep(self) -> None:
        """Nothing to free: generation holds no memory of its own between calls."""

    def close(self) -> None:
        """Nothing to release."""

    def _generation_config(self, sampling: SamplingParams) -> GenerationConfig:
        # Every knob is set explicitly: transformers fills unset ones from the checkpoint's generation_config
        # (Qwen's sets top_p=0.8 and a repetition penalty), and those would make the sampler differ from the
        # distribution whose log-probs the loss uses.
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "eos_token_id": list(self.eos_token_ids),
            "pad_token_id": self.pad_token_id,
            "use_cache": True,
            "num_return_sequences": 1,
            "repetition_penalty": 1.0,
        }
        if sampling.temperature > 0:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        else:
            kwargs.update(do_sample=False)
        return GenerationConfig(**kwargs)


class _TurnStop(StoppingCriteria):
    """Stops each row of a ``generate`` call at its token budget or where ``stop`` sees a complete tool call in the
    row's new text; records, per row, how many new tokens it kept (``stopped_at``)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, stop: StopCondition, prefix_width: int, budgets: Sequence[int]
    ) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.prefix_width = prefix_width
        self.budgets = list(budgets)
        self.triggers = tuple(s.strip() for s in stop.stop_strings if s.strip())
        self.tail_tokens = max((len(t) for t in self.triggers), default=1) + 2  # a token holds at least a character
        self.stopped_at: dict[int, int] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        new = input_ids.shape[1] - self.prefix_width
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for i in range(input_ids.shape[0]):
            if i in self.stopped_at:
                done[i] = True
                continue
            tail = self.tokenizer.decode(input_ids[i, -min(new, self.tail_tokens) :].tolist())
            if new >= self.budgets[i] or (
                any(t in tail for t in self.triggers)
                and self.stop.find_call(str(self.tokenizer.decode(input_ids[i, self.prefix_width :].tolist())))
                is not None
            ):
                self.stopped_at[i] = new
                done[i] = True
        return done  # type: ignore[return-value]
