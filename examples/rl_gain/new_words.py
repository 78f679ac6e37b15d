"""Give the RL regime's verbs the embedding a model would start a new word of a known kind with: a mix of the
cold start's verb embeddings (input and, when tied, output rows), calibrated so that the start writes either
operation for a new verb equally often.

A verb the cold start never saw has an embedding row that only the output softmax ever moved (pushed away from
every hidden state, since the token never comes next): the model then reads it as no verb at all, picks one
operation for every new verb with near certainty, and never samples the other (measured: pass@8 22-50% against
pass@1 13-43% over 3 seeds, one operation right and the other at 0-1%). Started at the mean of the known verbs, a
new verb reads as "a verb of this slot, operation unknown": the model samples both operations, and which one each
new verb means is left for the reward to say. This is how vocabulary added to a trained model is usually started
(from the mean of existing embeddings, as ``resize_token_embeddings(mean_resizing=True)`` does over all of them).

The plain mean was not enough: how the cold start reads it varies with the seed and even with the CPU (the same
seed on another machine's float kernels gives another cold start). Measured on the RL prompts' first working line,
the three seeds' starts on one machine wrote ``+`` in 2%, 92% and 82% of their samples, and GRPO then gained +20,
+5.5 and +56 points: where the start never writes one of the operations, there is nothing for the reward to
reinforce. So the new rows are ``alpha * mean(+ verbs) + (1 - alpha) * mean(- verbs)`` (``alpha = 0.5`` is the plain
mean), with ``alpha`` found by bisection so that half of the operations the start samples (temperature 1) for the
RL prompts are ``+``. The calibration reads only prompts and the start's own samples: no answer, no label, no
worked solution of the RL regime. All new verbs share the row, so the start cannot tell them apart; that is what
the reward has to teach.

A shared row has a cost, measured on an AMD EPYC (docs/examples/rl_gain.md): whatever the update does to how the
network reads that row, it does to all eight verbs at once, and in one seed of three GRPO settled on ``+`` for
every new verb (+5 points). With ``--spread`` each new verb gets its own row: the mix plus an offset drawn from the
known verbs' own spread with its component along the ``+``/``-`` axis removed (:func:`identity_offsets`, as
``resize_token_embeddings(mean_resizing=True)`` draws new rows from the old rows' covariance), and its own
``alpha``, bisected on the prompts that use it (:func:`calibrate_per_verb`). The verbs are then told apart from
the start but still told nothing of their operation. ``--lean`` moves half of them (drawn from the seed) off the
even share, to ``0.5 +- lean``.

    python examples/rl_gain/new_words.py CHECKPOINT OUT_DIR [--prompts RL_PROMPTS.jsonl] [--spread 1] [--lean 0.25]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

_spec = importlib.util.spec_from_file_location("rl_gain_prepare", Path(__file__).parent / "prepare.py")
assert _spec is not None and _spec.loader is not None
prepare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prepare)


def verb_ids(tokenizer: object, verbs: list[str]) -> list[int]:
    """The single token id of each verb (each is one added token, see prepare.py).

    Raises:
        ValueError: a verb is not one token.
    """
    ids = []
    for verb in verbs:
        tokens = tokenizer(verb, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        if len(tokens) != 1:
            raise ValueError(f"verb {verb!r} is {len(tokens)} tokens, not 1: was the tokenizer built by prepare.py?")
        ids.append(tokens[0])
    return ids


@torch.no_grad()
def start_new_verbs(
    model: torch.nn.Module,
    plus: list[int],
    minus: list[int],
    hard: list[int],
    alpha: float | list[float],
    spread: float = 0.0,
    seed: int = 0,
) -> None:
    """Set each ``hard`` token's embedding row to ``alpha * mean(plus rows) + (1 - alpha) * mean(minus rows)``, in
    the input embeddings and in the output embeddings when they are a separate matrix (``alpha = 0.5`` with as
    many ``plus`` as ``minus`` tokens is the mean of them all).

    Args:
        alpha: one mix for every new verb, or one per ``hard`` token.
        spread: 0 gives every new verb the same row. Above 0, each row gets its own offset ``spread *``
            :func:`identity_offsets` (drawn from ``seed``): distinct verbs, none told its operation.
    """
    tables = [model.get_input_embeddings().weight]  # type: ignore[operator]
    out = model.get_output_embeddings()  # type: ignore[operator]
    if out is not None and out.weight.data_ptr() != tables[0].data_ptr():
        tables.append(out.weight)
    mix = torch.as_tensor(alpha, dtype=tables[0].dtype).reshape(-1, 1).expand(len(hard), 1)  # (len(hard), 1)
    for table in tables:  # (V, H)
        rows = mix * table[plus].mean(0) + (1 - mix) * table[minus].mean(0)  # (len(hard), H)
        if spread > 0:
            rows = rows + spread * identity_offsets(table, plus, minus, len(hard), seed)
        table[hard] = rows


def identity_offsets(table: torch.Tensor, plus: list[int], minus: list[int], count: int, seed: int) -> torch.Tensor:
    """``count`` random offsets shaped like the known verbs' own spread, with no component along the operation axis.

    Each offset is ``z @ D / sqrt(K - 1)`` with ``z ~ N(0, I)`` of shape ``(count, K)`` and ``D`` the ``K`` known
    verbs' rows minus their mean ``(K, H)``: a draw from the known rows' covariance, as
    ``resize_token_embeddings(mean_resizing=True)`` draws new rows from the old rows' covariance. The component along
    ``mean(plus) - mean(minus)`` is removed, so the offset tells a verb apart from the others without saying which
    operation it means (how the model reads it still moves the ``+`` share, which the per-verb calibration evens).

    Returns:
        ``(count, H)`` tensor in the table's dtype.
    """
    known = table[plus + minus].float()  # (K, H)
    deviations = known - known.mean(0)  # (K, H)
    axis = table[plus].float().mean(0) - table[minus].float().mean(0)  # (H,)
    axis = axis / axis.norm().clamp(min=1e-12)
    z = torch.randn(count, len(known), generator=torch.Generator().manual_seed(seed))  # (count, K)
    offsets = z @ deviations / max(len(known) - 1, 1) ** 0.5  # (count, H)
    offsets = offsets - (offsets @ axis).unsqueeze(1) * axis  # (count, H), orthogonal to the operation axis
    return offsets.to(table.dtype)


_OPERATION = re.compile(r"\d ([+-]) \d")


@torch.no_grad()
def first_operations(
    model: torch.nn.Module, tokenizer: object, prompts: list[str], samples: int, seed: int
) -> list[str]:
    """The first operation (``"+"``, ``"-"``, or ``""`` for none) the model writes in each of ``samples`` samples
    per prompt, at temperature 1, in the first 12 tokens (enough for the first working line).

    Returns:
        ``len(prompts) * samples`` strings, prompt-major (``generate``'s order for ``num_return_sequences``).

    The same ``seed`` for every call, so that two ``alpha`` values are compared on the same random numbers.
    """
    torch.manual_seed(seed)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")  # type: ignore[operator]
    out = model.generate(  # type: ignore[operator]
        **enc,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=12,
        num_return_sequences=samples,
        pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
    )  # (len(prompts) * samples, P + 12)
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)  # type: ignore[attr-defined]
    return [m.group(1) if m else "" for m in map(_OPERATION.search, texts)]


def _share(ops: list[str]) -> float:
    """The share of ``+`` among the operations written (samples with none left out; 0 when there is none)."""
    written = [op for op in ops if op]
    return written.count("+") / max(len(written), 1)


def plus_share(model: torch.nn.Module, tokenizer: object, prompts: list[str], samples: int, seed: int) -> float:
    """The share of ``+`` among the first operations the model samples for ``prompts`` (:func:`first_operations`)."""
    return _share(first_operations(model, tokenizer, prompts, samples, seed))


def calibrate(
    model: torch.nn.Module,
    tokenizer: object,
    ids: tuple[list[int], list[int], list[int]],
    prompts: list[str],
    *,
    samples: int = 8,
    iterations: int = 10,
    seed: int = 0,
) -> tuple[float, float, list[tuple[float, float]]]:
    """Bisect ``alpha`` in [0, 1] towards a ``+`` share of 1/2 (the share grows with ``alpha``).

    Returns:
        ``(alpha, share, trace)``: the chosen ``alpha``, its ``+`` share, and every ``(alpha, share)`` tried.
    """
    plus, minus, hard = ids

    def measure(alphas: list[float]) -> list[float]:
        start_new_verbs(model, plus, minus, hard, alphas[0])
        return [plus_share(model, tokenizer, prompts, samples, seed)]

    (trace,) = _bisect(measure, [0.5], iterations)
    alpha, share = min(trace, key=lambda t: abs(t[1] - 0.5))
    start_new_verbs(model, plus, minus, hard, alpha)
    return alpha, share, trace


def _bisect(
    measure: Callable[[list[float]], list[float]], goals: list[float], iterations: int
) -> list[list[tuple[float, float]]]:
    """Bisect ``len(goals)`` values in [0, 1] at once, each towards its goal, for shares that grow with the value:
    every iteration measures all midpoints with one ``measure(alphas) -> shares`` call and moves each interval up
    where its share is below its goal, else down.

    Returns:
        per goal, every ``(alpha, share)`` tried, in order.
    """
    low, high = [0.0] * len(goals), [1.0] * len(goals)
    traces: list[list[tuple[float, float]]] = [[] for _ in goals]
    for _ in range(iterations):
        alphas = [(lo + hi) / 2 for lo, hi in zip(low, high, strict=True)]
        for v, (alpha, share) in enumerate(zip(alphas, measure(alphas), strict=True)):
            traces[v].append((alpha, share))
            low[v], high[v] = (alpha, high[v]) if share < goals[v] else (low[v], alpha)
    return traces


def lean_targets(count: int, lean: float, seed: int) -> list[float]:
    """Per new verb, the ``+`` share its start is calibrated to: ``0.5 + lean`` for half of them and ``0.5 - lean``
    for the rest (the larger half for an odd count), which half drawn from ``seed`` alone, never from the verbs'
    operations, so a start leans the right way for about half the verbs whatever they mean.

    A start at 1/2 sits where greedy decoding flips with any small move of the logits (the control's random
    walk included); a lean of 0.25 puts each verb about 1.1 nats of logit away from that edge while still sampling
    the other operation a quarter of the time.

    Raises:
        ValueError: ``lean`` outside [0, 0.5).
    """
    if not 0 <= lean < 0.5:
        raise ValueError(f"lean must be in [0, 0.5), got {lean}")
    sides = [1.0] * (count // 2) + [-1.0] * (count - count // 2)
    random.Random(seed).shuffle(sides)
    return [0.5 + side * lean for side in sides]


def calibrate_per_verb(
    model: torch.nn.Module,
    tokenizer: object,
    ids: tuple[list[int], list[int], list[int]],
    prompts: list[str],
    prompt_verbs: list[int],
    *,
    spread: float,
    targets: list[float] | None = None,
    samples: int = 8,
    iterations: int = 10,
    seed: int = 0,
) -> tuple[list[float], list[float]]:
    """Bisect one ``alpha`` per new verb, all at once, each towards a ``+`` share of ``targets[v]`` (default 1/2) on
    its own prompts.

    Every iteration sets every verb's row at the middle of its own interval (with its :func:`identity_offsets`
    at ``spread``), samples all prompts once, and moves each verb's interval by the share of its prompts.

    Args:
        prompt_verbs: for each prompt, the index into ``ids[2]`` of the new verb it uses.

    Returns:
        ``(alphas, shares)``: per new verb, the ``alpha`` tried closest to its target and its share.

    Raises:
        ValueError: a new verb has no prompt to calibrate on.
    """
    plus, minus, hard = ids
    missing = sorted(set(range(len(hard))) - set(prompt_verbs))
    if missing:
        raise ValueError(f"no calibration prompt uses new verb(s) {missing}: raise --calibration-prompts")
    goals = targets if targets is not None else [0.5] * len(hard)

    def measure(alphas: list[float]) -> list[float]:
        start_new_verbs(model, plus, minus, hard, alphas, spread=spread, seed=seed)
        ops = first_operations(model, tokenizer, prompts, samples, seed)
        return [_share([op for i, op in enumerate(ops) if prompt_verbs[i // samples] == v]) for v in range(len(hard))]

    traces = _bisect(measure, goals, iterations)
    best = [min(trace, key=lambda t: abs(t[1] - goal)) for trace, goal in zip(traces, goals, strict=True)]
    start_new_verbs(model, plus, minus, hard, [a for a, _ in best], spread=spread, seed=seed)
    return [a for a, _ in best], [s for _, s in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--prompts",
        type=Path,
        help="RL prompts (JSONL with 'prompt') to calibrate on; without: the plain mean of the known verbs",
    )
    parser.add_argument("--calibration-prompts", type=int, default=64, help="how many of them")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lean",
        type=float,
        default=0.0,
        help="with per-verb calibration: half the new verbs (drawn from --seed, not from their operation) start at a "
        "+ share of 0.5 + lean, the other half at 0.5 - lean (0: every verb at 0.5)",
    )
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="0: one shared row for every new verb; above 0: each verb its own row (identity_offsets at this "
        "scale) and its own alpha, calibrated on its own prompts",
    )
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint).eval()
    easy = prepare.EASY_VERBS
    ids = (
        verb_ids(tokenizer, [v for v, op in easy.items() if op == "+"]),
        verb_ids(tokenizer, [v for v, op in easy.items() if op == "-"]),
        verb_ids(tokenizer, list(prepare.HARD_VERBS)),
    )
    report: dict[str, object] = {"alpha": 0.5}
    if args.prompts is None:
        start_new_verbs(model, *ids, alpha=0.5, spread=args.spread, seed=args.seed)
    elif args.spread > 0 or args.lean > 0:
        with args.prompts.open() as f:
            rows = [json.loads(line) for line in f][: args.calibration_prompts]
        hard = list(prepare.HARD_VERBS)
        targets = lean_targets(len(hard), args.lean, args.seed)
        alphas, shares = calibrate_per_verb(
            model,
            tokenizer,
            ids,
            [r["prompt"] for r in rows],
            [hard.index(r["type"]) for r in rows],
            spread=args.spread,
            targets=targets,
            seed=args.seed,
        )
        report = {"alpha": alphas, "plus_share": shares, "targets": targets, "spread": args.spread, "verbs": hard}
        print(f"spread {args.spread}: per-verb alpha {[round(a, 4) for a in alphas]}, + share {shares}")
    else:
        with args.prompts.open() as f:
            prompts = [json.loads(line)["prompt"] for line in f][: args.calibration_prompts]
        alpha, share, trace = calibrate(model, tokenizer, ids, prompts, seed=args.seed)
        report = {"alpha": alpha, "plus_share": share, "trace": trace}  # trace[0]: the plain mean (alpha 0.5)
        print(f"alpha {alpha:.4f}: the start writes + in {share:.1%} of its first operations ({trace})")
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    (args.out / "new_words.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"the start, with the new verbs at alpha {report['alpha']} between the known + and - verbs: {args.out}")


if __name__ == "__main__":
    main()
