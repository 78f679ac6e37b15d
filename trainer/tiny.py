"""Tiny causal LMs and tokenizers built from scratch, for tests, the CPU example and benchmarks.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on text the caller gives (digits split one by
one, which helps arithmetic), and the model is a randomly initialised Qwen2 or Llama built from a config.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

EOS_TOKEN = "<|endoftext|>"


def build_tokenizer(
    corpus: Iterable[str],
    *,
    vocab_size: int = 512,
    extra_tokens: Sequence[str] = (),
    chat_template: str | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` and wrap it for ``transformers``.

    Decoding is lossless (byte-level), numbers are split into single digits, ``<|endoftext|>`` is both EOS and
    padding, and ``extra_tokens`` (e.g. ``<think>``) become single, non-special tokens so that
    ``decode(..., skip_special_tokens=True)`` keeps them in the completion text.

    Args:
        corpus: training text.
        vocab_size: target BPE vocabulary size (the 256 byte symbols and the EOS included).
        extra_tokens: whole tokens to add after training.
        chat_template: a Jinja chat template to attach, or ``None`` for plain-text prompts.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)
    if extra_tokens:
        hf.add_tokens(list(extra_tokens))
    if chat_template is not None:
        hf.chat_template = chat_template
    return hf


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    architecture: Literal["qwen2", "llama"] = "qwen2",
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 512,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised causal LM sized for CPU tests (about 1M parameters with the defaults).

    Args:
        tokenizer: sets the vocabulary size and the EOS/pad ids of the model and its generation config.
        architecture: ``qwen2`` or ``llama``.
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: the transformer's shape
            (``intermediate_size`` defaults to ``4 * hidden_size``).
        max_position_embeddings: longest prompt + completion in tokens.
        seed: initialisation seed (the global RNG is left as it was).
    """
    common = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size or 4 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.eos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if architecture == "qwen2":
            model: PreTrainedModel = Qwen2ForCausalLM(Qwen2Config(**common))
        elif architecture == "llama":
            model = LlamaForCausalLM(LlamaConfig(**common))
        else:
            raise ValueError(f"architecture must be 'qwen2' or 'llama', got {architecture!r}")
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def supervised_warm_up(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    pairs: Sequence[tuple[str, str]],
    *,
    steps: int,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    log: Callable[[str], None] | None = None,
) -> list[float]:
    """Supervised fine-tuning on ``(prompt, completion)`` pairs, loss on the completion (and its EOS) only.

    AdamW with a linear warm-up over the first 10 % of steps, then a constant learning rate (no decay, so stopping
    early leaves a model still mid-way through learning), and gradient clipping at 1.0; the pairs are visited in
    order, wrapping around. Used to give a random tiny model a starting point that GRPO can improve.

    Args:
        model: trained in place (left in train mode).
        tokenizer: its EOS ends every completion; its pad token pads.
        pairs: prompt text and the completion to imitate.
        steps: optimizer steps.
        batch_size: pairs per step.
        learning_rate: peak learning rate.
        log: called with a progress line every 50 steps and at the end.

    Returns:
        The loss of every step.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    warm = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm))
    model.train()
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        chunk = [pairs[(step * batch_size + k) % len(pairs)] for k in range(batch_size)]
        encoded = [(tokenizer(p)["input_ids"], tokenizer(c + tokenizer.eos_token)["input_ids"]) for p, c in chunk]
        width = max(len(p) + len(c) for p, c in encoded)
        ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)  # -100: ignored by the loss (prompt and padding)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        for k, (p, c) in enumerate(encoded):
            ids[k, : len(p) + len(c)] = torch.tensor(p + c)
            labels[k, len(p) : len(p) + len(c)] = torch.tensor(c)
            mask[k, : len(p) + len(c)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(f"warm-up step {step:4d}  loss {loss.item():.3f}  {time.perf_counter() - start:5.0f} s")
    return losses
