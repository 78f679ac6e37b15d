"""Give the RL regime's verbs the embedding a model would start a new word of a known kind with: the mean of the
cold start's verb embeddings (input and, when tied, output rows).

A verb the cold start never saw has an embedding row that only the output softmax ever moved (pushed away from
every hidden state, since the token never comes next): the model then reads it as no verb at all, picks one
operation for every new verb with near certainty, and never samples the other (measured: pass@8 22-50% against
pass@1 13-43% over 3 seeds, one operation right and the other at 0-1%). Started at the mean of the known verbs, a
new verb reads as "a verb of this slot, operation unknown": the model samples both operations, and which one each
new verb means is left for the reward to say. This is how vocabulary added to a trained model is usually started
(from the mean of existing embeddings, as ``resize_token_embeddings(mean_resizing=True)`` does over all of them).

    python examples/rl_gain/new_words.py CHECKPOINT OUT_DIR
"""

from __future__ import annotations

import argparse
import importlib.util
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
def start_new_verbs(model: torch.nn.Module, easy: list[int], hard: list[int]) -> None:
    """Set each ``hard`` token's embedding row to the mean of the ``easy`` tokens' rows, in the input embeddings
    and in the output embeddings when they are a separate matrix."""
    tables = [model.get_input_embeddings().weight]  # type: ignore[operator]
    out = model.get_output_embeddings()  # type: ignore[operator]
    if out is not None and out.weight.data_ptr() != tables[0].data_ptr():
        tables.append(out.weight)
    for table in tables:  # (V, H)
        table[hard] = table[easy].mean(0, keepdim=True).expand(len(hard), -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint)
    start_new_verbs(model, verb_ids(tokenizer, list(prepare.EASY_VERBS)), verb_ids(tokenizer, list(prepare.HARD_VERBS)))
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"the start, with the new verbs at the mean of the known ones: {args.out}")


if __name__ == "__main__":
    main()
