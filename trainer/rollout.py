"""Rollouts: G sampled completions per prompt behind a small backend interface, and their log-probs.

:class:`GenerationBackend` is what the loop calls; :class:`TransformersBackend` implements it with
``model.generate`` (sampling, left padding, KV cache, stop at EOS); :class:`trainer.vllm_backend.VLLMBackend`
implements the same ``generate`` with a vLLM engine and returns the same :class:`RolloutBatch`.

:func:`completion_log_probs` recomputes the log-probs of a batch with the policy (or the reference model) using
the same positions that generation used, so the importance ratio of an unchanged policy is exactly 1.

Shapes: ``N`` completions, ``P`` prompt tokens (left-padded), ``C`` completion tokens (right-padded), ``V``
vocabulary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.utils.checkpoint
from transformers import AutoConfig, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from trainer.distributed import unwrap
from trainer.grpo import entropy_from_logits, sampling_support, token_log_probs

Prompt = str | Sequence[Mapping[str, str]]
"""A prompt: plain text, or chat messages ``[{"role": ..., "content": ...}]``."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions.

    Attributes:
        max_new_tokens: most tokens per completion.
        temperature: 0 decodes greedily; otherwise the softmax temperature.
        top_p: nucleus threshold (1.0 keeps all tokens).
        top_k: keep the k most likely tokens (0 keeps all).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    @classmethod
    def from_config(cls, config: Any) -> SamplingParams:
        """A config's sampling knobs (``max_completion_length``, ``temperature``, ``top_p``, ``top_k``), as
        ``train`` and ``sample`` have them."""
        return cls(config.max_completion_length, config.temperature, config.top_p, config.top_k)


@dataclass(frozen=True)
class RolloutBatch:
    """Prompts and their sampled completions, ready for scoring and the loss.

    Attributes:
        prompt_ids: ``(N, P)`` left-padded prompt tokens (each prompt repeated once per completion).
        prompt_mask: ``(N, P)`` 1 on real prompt tokens.
        completion_ids: ``(N, C)`` right-padded completion tokens.
        completion_mask: ``(N, C)`` 1 on completion tokens up to and including the first EOS.
        is_truncated: ``(N,)`` True where the completion reached the length limit without EOS.
        prompt_index: ``(N,)`` index of each completion's prompt in the list given to ``generate``; the loop
            turns it into a group id.
        completion_texts: decoded completions (special tokens skipped), one per row.
        sampling_log_probs: ``(N, C)`` log-probs of the sampled tokens as the sampler computed them (0 on
            padding), from backends whose sampler is not the policy's own forward (vLLM); ``None`` otherwise.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    is_truncated: torch.Tensor
    prompt_index: torch.Tensor
    completion_texts: list[str]
    sampling_log_probs: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def completion_lengths(self) -> torch.Tensor:
        """``(N,)`` completion tokens counted by the mask (EOS included)."""
        return self.completion_mask.sum(-1)

    def select(self, rows: torch.Tensor | slice) -> RolloutBatch:
        """The given rows, with padding columns that every selected row has dropped (a micro-batch)."""
        prompt_mask = self.prompt_mask[rows]  # (b, P)
        completion_mask = self.completion_mask[rows]  # (b, C)
        p_start = _first_nonzero_column(prompt_mask)
        c_end = max(1, int(completion_mask.sum(-1).max().item())) if len(completion_mask) else 1
        index = range(len(self))[rows] if isinstance(rows, slice) else rows.tolist()
        return RolloutBatch(
            prompt_ids=self.prompt_ids[rows][:, p_start:],
            prompt_mask=prompt_mask[:, p_start:],
            completion_ids=self.completion_ids[rows][:, :c_end],
            completion_mask=completion_mask[:, :c_end],
            is_truncated=self.is_truncated[rows],
            prompt_index=self.prompt_index[rows],
            completion_texts=[self.completion_texts[i] for i in index],
            sampling_log_probs=None if self.sampling_log_probs is None else self.sampling_log_probs[rows][:, :c_end],
        )

    @staticmethod
    def concat(batches: Sequence[RolloutBatch], pad_token_id: int) -> RolloutBatch:
        """Join batches from several ``generate`` calls; ``prompt_index`` is offset so it stays unique."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        p = max(b.prompt_ids.shape[1] for b in batches)
        c = max(b.completion_ids.shape[1] for b in batches)
        offsets, total = [], 0
        for b in batches:
            offsets.append(total)
            total += int(b.prompt_index.max().item()) + 1 if len(b) else 0
        return RolloutBatch(
            prompt_ids=torch.cat([_pad_left(b.prompt_ids, p, pad_token_id) for b in batches]),
            prompt_mask=torch.cat([_pad_left(b.prompt_mask, p, 0) for b in batches]),
            completion_ids=torch.cat([_pad_right(b.completion_ids, c, pad_token_id) for b in batches]),
            completion_mask=torch.cat([_pad_right(b.completion_mask, c, 0) for b in batches]),
            is_truncated=torch.cat([b.is_truncated for b in batches]),
            prompt_index=torch.cat([b.prompt_index + off for b, off in zip(batches, offsets, strict=True)]),
            completion_texts=[t for b in batches for t in b.completion_texts],
            sampling_log_probs=(
                torch.cat([_pad_right(b.sampling_log_probs, c, 0) for b in batches])  # type: ignore[arg-type]
                if all(b.sampling_log_probs is not None for b in batches)
                else None
            ),
        )


def _first_nonzero_column(mask: torch.Tensor) -> int:
    """First column where any row is 1, i.e. how many left-padding columns all rows share."""
    any_real = mask.any(0)  # (P,)
    return int(any_real.to(torch.int64).argmax().item()) if any_real.any() else mask.shape[1]


def _pad_left(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)


def _pad_right(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


class GenerationBackend(Protocol):
    """Samples completions. Implementations: :class:`TransformersBackend` and
    :class:`trainer.vllm_backend.VLLMBackend`.

    The loop calls :meth:`generate` for every chunk of prompts, :meth:`sleep` once a step's sampling is done, and
    :meth:`sync_weights` after every optimizer step.
    """

    pad_token_id: int
    """The id that pads prompts (on the left) and completions (on the right) in the batches it returns."""

    def generate(self, prompts: Sequence[Prompt], num_generations: int, sampling: SamplingParams) -> RolloutBatch:
        """Sample ``num_generations`` completions of each prompt; rows ``i*G .. i*G+G-1`` answer prompt ``i``."""
        ...

    def sync_weights(self) -> dict[str, float]:
        """The policy's weights changed (an optimizer step): make the sampler use them; returns metrics."""
        ...

    def sleep(self) -> None:
        """Sampling is done until the next :meth:`sync_weights`: free what the sampler holds, where it can."""
        ...

    def close(self) -> None:
        """The run is over: release the sampler."""
        ...


class PromptEncoder:
    """Prompts to left-padded token ids: the chat template where there is one, then the end of the prompt kept.

    Args:
        tokenizer: its ``pad_token`` (or EOS when it has none) pads.
        max_prompt_length: prompt tokens kept, from the end; ``None`` keeps all.
        apply_chat_template: render prompts with the tokenizer's chat template when it has one; a plain
            string becomes a single user message. Without a template, a string is used as is and chat messages
            are refused.

    Raises:
        ValueError: the tokenizer has neither a pad nor an EOS token.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_prompt_length: int | None = None,
        apply_chat_template: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.use_chat_template = apply_chat_template and getattr(tokenizer, "chat_template", None) is not None
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an EOS token; set tokenizer.pad_token")
        self.pad_token_id: int = int(pad)

    def render(self, prompt: Prompt) -> str:
        """The prompt text the model sees (chat template applied where there is one).

        Raises:
            ValueError: chat messages for a tokenizer without a chat template.
        """
        if self.use_chat_template:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return str(text)
        if isinstance(prompt, str):
            return prompt
        raise ValueError(
            "prompt is a list of chat messages but the tokenizer has no chat_template (or apply_chat_template is "
            "off); give plain-text prompts or a tokenizer with a chat template"
        )

    def token_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids, whole (before ``max_prompt_length`` cuts them)."""
        # A chat template already writes BOS and the like; adding special tokens again would double them.
        return list(self.tokenizer(self.render(prompt), add_special_tokens=not self.use_chat_template)["input_ids"])

    def prompt_length(self, prompt: Prompt) -> int:
        """Tokens of the whole rendered prompt (compare with ``max_prompt_length`` to see what is cut)."""
        return len(self.token_ids(prompt))

    def encode(self, prompts: Sequence[Prompt]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenise and left-pad prompts: ``(ids, mask)``, both ``(len(prompts), P)``.

        Raises:
            ValueError: a prompt that gives no token (the model would have nothing to condition on).
        """
        rows = []
        for i, prompt in enumerate(prompts):
            ids = self.token_ids(prompt)
            if not ids:
                raise ValueError(f"prompt {i} gives no token: {prompt!r:.80}")
            if self.max_prompt_length is not None:
                ids = ids[-self.max_prompt_length :]
            rows.append(ids)
        width = max(len(r) for r in rows)
        ids_t = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids_t[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        return ids_t, mask


class TransformersBackend:
    """Generation with ``transformers``' ``model.generate``: left padding, KV cache, stops at EOS.

    Args:
        model: the policy; generation runs in eval mode under ``torch.no_grad`` and restores the mode after.
        tokenizer: its ``pad_token`` (or EOS when it has none) pads.
        max_prompt_length, apply_chat_template: see :class:`PromptEncoder`.
        autocast: a context manager factory entered around ``generate``: the update's autocast (bf16 on CUDA),
            so that sampling draws from the distribution whose log-probs the loss computes.
        synced_gpus: keep every rank in ``generate`` until all have finished (needed when the policy is sharded
            with FSDP: each forward gathers the parameters with a collective).
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
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.autocast = autocast
        self.synced_gpus = synced_gpus
        self.prompts = PromptEncoder(
            tokenizer, max_prompt_length=max_prompt_length, apply_chat_template=apply_chat_template
        )
        self.use_chat_template = self.prompts.use_chat_template
        self.pad_token_id = self.prompts.pad_token_id
        self.eos_token_ids = eos_token_ids(model, tokenizer)

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
        ids, mask = self.encode(prompts)  # (n, P)
        ids = ids.repeat_interleave(num_generations, 0).to(device)  # (N, P)
        mask = mask.repeat_interleave(num_generations, 0).to(device)  # (N, P)
        was_training = self.model.training
        self.model.eval()
        try:
            with self.autocast():
                out = self.model.generate(  # type: ignore[operator]
                    input_ids=ids,
                    attention_mask=mask,
                    generation_config=self._generation_config(sampling),
                    synced_gpus=self.synced_gpus,
                )  # (N, P + C)
        finally:
            self.model.train(was_training)
        completion_ids = out[:, ids.shape[1] :]  # (N, C)
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


def decode_completions(
    tokenizer: PreTrainedTokenizerBase, completion_ids: torch.Tensor, completion_mask: torch.Tensor
) -> list[str]:
    """The text of each ``(N, C)`` completion row up to its mask's end, special tokens (EOS) skipped."""
    return [
        str(tokenizer.decode(row[: int(n)].tolist(), skip_special_tokens=True))
        for row, n in zip(completion_ids, completion_mask.sum(-1), strict=True)
    ]


@dataclass(frozen=True)
class SavedModel:
    """A model directory as :func:`eos_token_ids` reads it (its ``generation_config``), without loading weights.

    Attributes:
        path: a ``save_pretrained`` directory or a hub id.
    """

    path: str

    @property
    def generation_config(self) -> Any:
        try:
            return GenerationConfig.from_pretrained(self.path)
        except OSError:  # no generation_config.json: the model config's EOS
            return GenerationConfig.from_model_config(AutoConfig.from_pretrained(self.path))


def eos_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """EOS ids from the model's generation config (may be several, e.g. Qwen's ``<|im_end|>``) and the tokenizer.

    ``model`` is anything with a ``generation_config`` (a ``PreTrainedModel``).
    """
    ids: list[int] = []
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.append(configured)
    elif configured:
        ids.extend(int(i) for i in configured)
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError("neither the model's generation_config nor the tokenizer defines an EOS token")
    return tuple(dict.fromkeys(ids))


def completion_mask_from_ids(
    completion_ids: torch.Tensor, eos_token_ids: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask of the tokens up to and including the first EOS, and which rows never reached one.

    Args:
        completion_ids: ``(N, C)`` generated tokens (whatever follows EOS is ignored).
        eos_token_ids: the ids that end a completion.

    Returns:
        ``(mask, is_truncated)``: ``(N, C)`` long and ``(N,)`` bool.
    """
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_token_ids), device=completion_ids.device))  # (N, C)
    n, c = completion_ids.shape
    has_eos = is_eos.any(-1)  # (N,)
    first_eos = torch.where(has_eos, is_eos.to(torch.int64).argmax(-1), torch.full((n,), c, device=is_eos.device))
    positions = torch.arange(c, device=completion_ids.device).expand(n, c)  # (N, C)
    mask = (positions <= first_eos.unsqueeze(-1)).to(torch.long)  # (N, C)
    return mask, ~has_eos


def completion_log_probs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    temperature: float,
    *,
    with_entropy: bool = False,
    chunk_tokens: int | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and optionally entropies) of the completion tokens under ``model``.

    Positions are ``cumsum(attention_mask) - 1``, as ``generate`` computes them for left-padded prompts; without
    them a padded prompt would be scored at other positions than it was sampled at. Logits are divided by the
    sampling ``temperature`` (as TRL does) so the ratio compares the distribution that was sampled; with ``top_k``
    or ``top_p`` the softmax is renormalised over the tokens the sampler could draw (:func:`trainer.grpo.
    sampling_support`), so the log-probs are those of the truncated distribution the completions came from. (TRL
    takes the full softmax there, which makes top-k/top-p rollouts slightly off-policy.) Entropies stay those of
    the full distribution.

    Memory: unchunked, the ``(N, C, V)`` logits exist in float32 several times over (the LM head's output, the
    temperature-scaled copy kept for the backward pass, the entropy's temporaries): at Qwen's 152k vocabulary,
    ``C = 1024`` and ``N = 8`` that is about 5 GB per copy. With ``chunk_tokens`` the LM head is applied to
    ``chunk_tokens`` completion positions at a time, inside the model's forward (so DDP and FSDP see an ordinary
    forward), and each chunk's logits are recomputed in the backward pass instead of kept
    (``torch.utils.checkpoint``): extra memory is about ``chunk_tokens * V`` floats, whatever ``N`` and ``C``.
    Models whose LM head is not a plain linear layer, or that post-process logits (Gemma's soft-capping), take
    the unchunked path.

    Args:
        model: policy or reference model (or its DDP/FSDP wrapper), on the batch's device.
        batch: a :class:`RolloutBatch` (usually a micro-batch from :meth:`RolloutBatch.select`).
        temperature: the sampling temperature (> 0).
        with_entropy: also return per-token entropies (detached).
        chunk_tokens: completion positions whose logits are computed at once; ``None`` computes all at once.
        top_k, top_p: the sampling truncation (0 and 1.0: none).

    Returns:
        ``(logp, entropy)``: ``(N, C)`` float32 each; ``entropy`` is ``None`` unless asked for. Grad flows into
        ``logp`` when called with grad enabled.
    """
    input_ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)  # (N, P + C)
    attention_mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)  # (N, P + C)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, P + C)
    c = batch.completion_ids.shape[1]

    def forward() -> Any:
        return model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=c + 1,
        )

    head = _plain_lm_head(model)
    if chunk_tokens is None or head is None:
        logits = forward().logits[:, :-1, :] / temperature  # (N, C, V): position t predicts completion token t
        support = sampling_support(logits, top_k, top_p)  # (N, C, V) or None
        logp = token_log_probs(logits, batch.completion_ids, support)  # (N, C)
        entropy = entropy_from_logits(logits.detach()) if with_entropy else None  # (N, C)
        return logp, entropy
    with _chunked_lm_head(head, batch.completion_ids, temperature, chunk_tokens, with_entropy, top_k, top_p) as stats:
        logp = forward().logits[..., 0]  # (N, C): the head's stand-in output is the log-probs themselves
    return logp, stats.get("entropy")


def _plain_lm_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's LM head when it is a plain ``nn.Linear`` whose output the model returns as is, else ``None``."""
    inner = unwrap(model)
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    config = getattr(inner, "config", None)
    softcapped = getattr(config, "final_logit_softcapping", None) is not None
    return head if type(head) is torch.nn.Linear and not softcapped else None


@contextlib.contextmanager
def _chunked_lm_head(
    head: torch.nn.Linear,
    tokens: torch.Tensor,
    temperature: float,
    chunk_tokens: int,
    with_entropy: bool,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Iterator[dict[str, torch.Tensor]]:
    """While inside, ``head`` returns ``(N, C, 1)`` log-probs of ``tokens`` instead of ``(N, C + 1, V)`` logits.

    A pre-hook takes the head's input (the final hidden states) and hands the head an empty one, so the full
    logits are never computed; a forward hook then returns the chunked log-probs in place of the head's output.
    Both run inside the model's forward, where FSDP has gathered the head's weight. Entropies, when asked for,
    land in the yielded dict under ``"entropy"``.
    """
    stats: dict[str, torch.Tensor] = {}
    hidden: list[torch.Tensor] = []

    def pre_hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden.append(args[0])  # (N, C + 1, H)
        return (args[0][:, :0], *args[1:])

    def post_hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        h = hidden.pop()[:, :-1]  # (N, C, H): position t predicts completion token t
        logp, entropy = chunked_token_log_probs(
            h,
            head.weight,
            head.bias,
            tokens,
            temperature,
            chunk_tokens,
            with_entropy=with_entropy,
            top_k=top_k,
            top_p=top_p,
        )
        if entropy is not None:
            stats["entropy"] = entropy
        return logp.unsqueeze(-1).clone()  # (N, C, 1); a copy, since FSDP warns about returning a view

    handles = [head.register_forward_pre_hook(pre_hook), head.register_forward_hook(post_hook)]
    try:
        yield stats
    finally:
        for handle in handles:
            handle.remove()


def chunked_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: float,
    chunk_tokens: int,
    *,
    with_entropy: bool = False,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``tokens`` under ``softmax((hidden @ weight.T + bias) / temperature)``, ``chunk_tokens``
    positions at a time; with grad enabled each chunk's logits are recomputed in the backward pass. With
    ``top_k``/``top_p`` the softmax is renormalised over the sampler's support, as in :func:`completion_log_probs`.

    Args:
        hidden: ``(N, C, H)`` final hidden states (position t predicts ``tokens[:, t]``).
        weight: ``(V, H)`` LM head; ``bias``: ``(V,)`` or ``None``.
        tokens: ``(N, C)`` token ids.
        temperature: logits are divided by it.
        chunk_tokens: positions per chunk.
        with_entropy: also return the entropies of the same distributions (detached).
        top_k, top_p: the sampling truncation (0 and 1.0: none).

    Returns:
        ``(logp, entropy)``: ``(N, C)`` float32 each, ``entropy`` ``None`` unless asked for.
    """
    n, c, h = hidden.shape
    flat_h = hidden.reshape(n * c, h)  # (N*C, H)
    flat_t = tokens.reshape(n * c)  # (N*C,)
    keep = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    logps, entropies = [], []
    for lo in range(0, n * c, chunk_tokens):
        args = (flat_h[lo : lo + chunk_tokens], weight, bias, flat_t[lo : lo + chunk_tokens], temperature, top_k, top_p)
        if keep:
            logp = torch.utils.checkpoint.checkpoint(_chunk_log_probs, *args, use_reentrant=False)
        else:
            logp = _chunk_log_probs(*args)
        logps.append(logp)  # (k,)
        if with_entropy:
            with torch.no_grad():
                logits = torch.nn.functional.linear(args[0], weight, bias).float() / temperature  # (k, V)
                entropies.append(entropy_from_logits(logits))  # (k,)
    logp = torch.cat(logps).reshape(n, c)
    return logp, torch.cat(entropies).reshape(n, c) if with_entropy else None


def _chunk_log_probs(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
) -> torch.Tensor:
    logits = torch.nn.functional.linear(h, weight, bias).float() / temperature  # (k, V)
    return token_log_probs(logits, tokens, sampling_support(logits, top_k, top_p))  # (k,)
