"""Model-based rewards (DeepSeek-R1 phase 4, arXiv 2501.12948 section 2.3.4; process reward models, DeepSeekMath
arXiv 2402.03300 section 4.1.3): what runs in a model worker process, and the pure arithmetic on its outputs.

Two kinds of model, both ``transformers`` checkpoints saved with ``save_pretrained``:

* ``sequence``: an ``AutoModelForSequenceClassification`` (an outcome reward model, e.g. one trained with TRL's
  ``RewardTrainer``): one row of logits per input, shape ``(num_labels,)``.
* ``token``: an ``AutoModelForTokenClassification`` (a process reward model, PRM): logits at every token, read at
  the end of each reasoning step (or at a step tag put after it, when the PRM was trained with one).

The model sees the prompt and the completion: as a chat (user prompt, assistant completion) through the
tokenizer's chat template when it has one and the item has a prompt, else the prompt's text followed by the
completion's. The completion goes in verbatim: the template is rendered around a placeholder and the completion
put in its place, so a template that would rewrite the assistant's turn (drop its reasoning, say) cannot change
what is scored, and character offsets stay exact.

Inputs over the length limit are truncated: a ``sequence`` input keeps its *last* tokens (the end of the
completion, where the answer is), a ``token`` input its *first* (the question and the first steps; steps past
the limit get no score). Each result says how many tokens were dropped.

The worker side (:func:`init_worker`, :func:`score_payload`) imports torch and transformers lazily, when a worker
starts: the server process never imports them, and a server without a model path never needs them.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Normalize",
    "Scope",
    "answer_text",
    "init_worker",
    "normalize_score",
    "score_payload",
    "step_probability",
    "token_positions",
    "with_step_marks",
]

Kind = Literal["sequence", "token"]
Normalize = Literal["none", "sigmoid", "softmax", "standardize"]
Scope = Literal["response", "answer"]

# A placeholder for the completion when the chat template is rendered (private-use code points: no real
# completion holds them next to each other, and no template rewrites them).
_PLACEHOLDER = "\ue000rlvr-completion\ue001"
# Chat frames kept per worker: a group's completions share one prompt, which is rendered once.
_FRAME_CACHE = 1024


# ---------------------------------------------------------------------------------------------- pure functions


def _sigmoid(x: float) -> float:
    # Split by sign, so that exp never overflows.
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _softmax_at(logits: Sequence[float], label: int) -> float:
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    return weights[label] / sum(weights)


def normalize_score(
    logits: Sequence[float],
    *,
    label: int = 0,
    normalize: Normalize = "none",
    mean: float | None = None,
    std: float | None = None,
) -> float:
    """The reward of one ``sequence`` model output.

    Args:
        logits: the model's ``(num_labels,)`` logits for one input.
        label: which logit is the reward (0 for a one-label reward model, as TRL trains them).
        normalize: ``none``: the logit itself (a Bradley-Terry reward); ``sigmoid``: ``σ(logit)``, in (0, 1);
            ``softmax``: the label's probability over all labels, in (0, 1); ``standardize``:
            ``(logit - mean) / std`` (the normalisation OpenRLHF applies with ``--normalize_reward``).
        mean, std: for ``standardize``.

    Raises:
        ValueError: ``label`` out of range, or ``standardize`` without ``mean`` and a positive ``std``.
    """
    if not 0 <= label < len(logits):
        raise ValueError(f"label {label} is out of range for a model with {len(logits)} labels")
    raw = float(logits[label])
    if normalize == "none":
        return raw
    if normalize == "sigmoid":
        return _sigmoid(raw)
    if normalize == "softmax":
        return _softmax_at(logits, label)
    if mean is None or std is None or not std > 0:
        raise ValueError("standardize needs a mean and a std > 0")
    return (raw - mean) / std


def step_probability(logits: Sequence[float], label: int) -> float:
    """A PRM's score of one step: the probability of ``label`` (softmax over two labels or more; the sigmoid
    of the only logit with one label, where ``label`` must be 0).

    Raises:
        ValueError: ``label`` out of range.
    """
    if not 0 <= label < len(logits):
        raise ValueError(f"label {label} is out of range for a PRM with {len(logits)} labels")
    return _sigmoid(float(logits[0])) if len(logits) == 1 else _softmax_at(logits, label)


def answer_text(response: str, think_tag: str = "think") -> str:
    """What follows the reasoning: the text after the first ``</think>`` (after ``<think>`` when there is one);
    empty when the think block never closes (the completion ran out of tokens while thinking); the whole
    completion when it has no think tag at all. The reasoning is cut as for step rewards
    (:func:`reward_server.verifiers.steps.reasoning_span`).

    DeepSeek-R1 scores helpfulness on this part alone ("the final summary", section 2.3.4).
    """
    opening, closing = f"<{think_tag}>", f"</{think_tag}>"
    open_at = response.find(opening)
    close_at = response.find(closing, open_at + len(opening) if open_at >= 0 else 0)
    if close_at >= 0:
        return response[close_at + len(closing) :]
    return "" if open_at >= 0 else response


def with_step_marks(text: str, step_ends: Sequence[int], step_tag: str | None) -> tuple[str, list[int]]:
    """``(body, marks)``: the text a PRM reads, cut after the last step, and the character of ``body`` at which
    each step's score is read.

    Without ``step_tag`` the mark is the step's last character (``end - 1``). With one, the tag is put right
    after each step (before its separator) and the mark is the tag's first character: ``"a\\n\\nb"`` with ends
    ``[1, 4]`` and tag ``"<t>"`` reads ``"a<t>\\n\\nb<t>"`` at ``[1, 7]``.

    Raises:
        ValueError: ``step_ends`` not increasing or out of ``text``.
    """
    if any(not 0 < e <= len(text) for e in step_ends) or any(a >= b for a, b in itertools.pairwise(step_ends)):
        raise ValueError(f"step ends must increase within the text's {len(text)} characters, got {list(step_ends)}")
    if not step_ends:
        return "", []
    if step_tag is None:
        return text[: step_ends[-1]], [e - 1 for e in step_ends]
    parts: list[str] = []
    marks: list[int] = []
    cursor = length = 0
    for end in step_ends:
        parts.append(text[cursor:end])
        length += end - cursor
        marks.append(length)
        parts.append(step_tag)
        length += len(step_tag)
        cursor = end
    return "".join(parts), marks


def token_positions(offsets: Sequence[tuple[int, int]], chars: Sequence[int]) -> list[int]:
    """For each character index in ``chars``, the index of the token that holds it: the last token whose span
    starts at or before it. Tokens with an empty span (special tokens) are skipped; a character split over
    several byte tokens gives the last of them, the one that completes it.

    Args:
        offsets: ``[(start, end), ...]`` character spans of the tokens (a fast tokenizer's ``offset_mapping``).
        chars: character indices into the text that was tokenized.
    """
    starts: list[int] = []
    index: list[int] = []
    for i, (s, e) in enumerate(offsets):
        if e > s:
            starts.append(s)
            index.append(i)
    if not starts:
        return [0 for _ in chars]
    return [index[max(bisect.bisect_right(starts, c) - 1, 0)] for c in chars]


# ---------------------------------------------------------------------------------------------- the worker


@dataclass
class _Model:
    kind: Kind
    model: Any
    tokenizer: Any
    max_length: int | None
    frames: OrderedDict[str, tuple[str, str] | None]


@dataclass
class _State:
    models: dict[str, _Model]
    device: Any
    max_batch_tokens: int
    chat_template: bool
    step_tag: str | None


_STATE: _State | None = None


def init_worker(
    models: dict[Kind, str],
    *,
    device: str = "cpu",
    dtype: str = "auto",
    threads: int | None = None,
    max_length: int | None = None,
    max_batch_tokens: int = 65_536,
    chat_template: bool = True,
    step_tag: str | None = None,
    trust_remote_code: bool = False,
) -> None:
    """Load the models of this worker process (called once by the worker pool).

    Args:
        models: ``{kind: path}``, kind ``sequence`` or ``token``.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
        dtype: ``auto`` (float32 on CPU, bfloat16 on a GPU), ``float32``, ``bfloat16`` or ``float16``.
        threads: torch's intra-op threads (CPU), or ``None`` for torch's default.
        max_length: the longest input in tokens (capped by the model's ``max_position_embeddings``), or ``None``
            for the model's own limit (that and the tokenizer's ``model_max_length``).
        max_batch_tokens: most padded tokens in one forward pass.
        chat_template: use the tokenizer's chat template when there is one and the item has a prompt.
        step_tag: the PRM's step tag, put after each step (see :func:`with_step_marks`).
        trust_remote_code: passed to ``from_pretrained``.

    Raises:
        RuntimeError: a checkpoint without the classification head its kind needs (loading it would score with
            a randomly initialised head), a GPU asked for where there is none, or a PRM without a fast tokenizer.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    global _STATE
    # No progress bars in a server's log (tqdm's lock would also leave a semaphore behind a killed worker).
    transformers_logging.disable_progress_bar()
    if threads is not None:
        torch.set_num_threads(threads)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"RLVR_REWARD_MODEL_DEVICE={device} but torch sees no CUDA device")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(
        dtype, torch.float32 if device == "cpu" else torch.bfloat16
    )
    loaded: dict[str, _Model] = {}
    for kind, path in models.items():
        auto = AutoModelForSequenceClassification if kind == "sequence" else AutoModelForTokenClassification
        model, info = auto.from_pretrained(
            path, dtype=torch_dtype, trust_remote_code=trust_remote_code, output_loading_info=True
        )
        # A checkpoint of another kind (a causal LM, say) loads with a fresh, random head: refuse it.
        base = f"{model.base_model_prefix}."
        fresh = [k for k in info.get("missing_keys", ()) if not k.startswith(base)]
        if fresh:
            raise RuntimeError(
                f"{path}: the {auto.__name__} head is not in the checkpoint (missing {', '.join(sorted(fresh)[:4])}); "
                "it would score with random weights: give a model trained for this head"
            )
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if kind == "token" and not tokenizer.is_fast:
            raise RuntimeError(f"{path}: a PRM needs a fast tokenizer (character offsets), this one is not")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
            # Sequence classifiers pool at the last token that is not padding; they need to know which is.
            model.config.pad_token_id = tokenizer.pad_token_id
        limits = [n for n in (max_length, getattr(model.config, "max_position_embeddings", None)) if n]
        if max_length is None and 0 < tokenizer.model_max_length < 10**7:
            limits.append(tokenizer.model_max_length)
        model.to(device).eval()
        loaded[kind] = _Model(kind, model, tokenizer, min(limits, default=None), OrderedDict())
    _STATE = _State(loaded, torch.device(device), max_batch_tokens, chat_template, step_tag)


def _chat_frame(m: _Model, prompt: str) -> tuple[str, str] | None:
    """``(before, after)`` the completion in the rendered chat, or ``None`` if the template drops or rewrites
    it (cached per prompt)."""
    if prompt in m.frames:
        m.frames.move_to_end(prompt)
        return m.frames[prompt]
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": _PLACEHOLDER}]
    rendered = m.tokenizer.apply_chat_template(messages, tokenize=False)
    parts = rendered.split(_PLACEHOLDER)
    frame = (parts[0], parts[1]) if len(parts) == 2 else None
    m.frames[prompt] = frame
    if len(m.frames) > _FRAME_CACHE:
        m.frames.popitem(last=False)
    return frame


def _encode(
    state: _State, m: _Model, prompt: str | None, response: str, scope: Scope, step_ends: Sequence[int] | None
) -> tuple[list[int], list[int | None], int]:
    """``(input_ids, positions, truncated_tokens)`` of one item (positions: the token of each step's mark)."""
    if m.kind == "sequence":
        body, marks = (answer_text(response) if scope == "answer" else response), list[int]()
    else:
        body, marks = with_step_marks(response, step_ends or (), state.step_tag)
    frame = None
    if prompt is not None and state.chat_template and m.tokenizer.chat_template:
        frame = _chat_frame(m, prompt)
        if frame is None:
            raise ValueError(
                "the tokenizer's chat template does not keep the completion verbatim; "
                "set RLVR_REWARD_MODEL_CHAT_TEMPLATE=false to give the model plain text"
            )
    before, after = frame if frame is not None else (prompt or "", "")
    text = before + body + after
    # A rendered template holds its own special tokens (BOS included); plain text gets the tokenizer's.
    encoded = m.tokenizer(text, add_special_tokens=frame is None, return_offsets_mapping=bool(marks))
    ids: list[int] = encoded["input_ids"]
    positions: list[int | None] = []
    if marks:
        positions.extend(token_positions(encoded["offset_mapping"], [len(before) + c for c in marks]))
    dropped = 0
    if m.max_length is not None and len(ids) > m.max_length:
        dropped = len(ids) - m.max_length
        if m.kind == "sequence":
            ids = ids[dropped:]
        else:
            ids = ids[: m.max_length]
            positions = [p if p is not None and p < m.max_length else None for p in positions]
    return ids, positions, dropped


def _forward(state: _State, m: _Model, rows: list[list[int]]) -> Any:
    """Logits of right-padded ``rows``: ``(B, num_labels)`` for a sequence model, ``(B, T, num_labels)`` else."""
    import torch

    width = max(len(r) for r in rows)
    pad = m.tokenizer.pad_token_id or 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[b, : len(row)] = 1
    with torch.inference_mode():
        out = m.model(input_ids=ids.to(state.device), attention_mask=mask.to(state.device))
    return out.logits.float().cpu()


def score_payload(payload: tuple[str, Sequence[tuple[Any, ...]]]) -> list[tuple[str, Any, int]]:
    """Score one hand-off in a worker: ``(kind, [(prompt, response, scope, step_ends), ...])``.

    Returns, per item in order, ``("ok", value, truncated_tokens)`` or ``("error", detail, 0)``. ``value`` is
    the ``(num_labels,)`` logits as a list (``sequence``), or per step the logits at its mark, ``None`` for a step
    cut off by truncation (``token``). Inputs are sorted by length and run in forward passes of at most
    ``max_batch_tokens`` padded tokens; a pass that fails (out of memory, say) costs its own items alone.
    """
    assert _STATE is not None, "init_worker was not called"
    state = _STATE
    kind, items = payload
    m = state.models[kind]
    results: list[tuple[str, Any, int] | None] = [None] * len(items)
    encoded: dict[int, tuple[list[int], list[int | None], int]] = {}
    for i, (prompt, response, scope, step_ends) in enumerate(items):
        try:
            encoded[i] = _encode(state, m, prompt, response, scope, step_ends)
        except Exception as exc:  # a template or tokenizer failure costs its item
            results[i] = ("error", f"{type(exc).__name__}: {exc}"[:500], 0)
    order = sorted((i for i in encoded if encoded[i][0]), key=lambda i: len(encoded[i][0]))
    for i in encoded:
        if not encoded[i][0]:
            results[i] = ("error", "the input is empty (no tokens to score)", 0)
    start = 0
    while start < len(order):
        stop = start + 1  # rows are sorted, so the last row of a pass sets its width
        while stop < len(order) and (stop - start + 1) * len(encoded[order[stop]][0]) <= state.max_batch_tokens:
            stop += 1
        chunk = order[start:stop]
        try:
            logits = _forward(state, m, [encoded[i][0] for i in chunk])
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"[:500]
            for i in chunk:
                results[i] = ("error", detail, 0)
            _free_cache()
        else:
            for b, i in enumerate(chunk):
                _, positions, dropped = encoded[i]
                if kind == "sequence":
                    results[i] = ("ok", logits[b].tolist(), dropped)
                else:
                    results[i] = ("ok", [None if p is None else logits[b, p].tolist() for p in positions], dropped)
        start = stop
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _free_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
