"""The PPO-ptx term (``pretrain_data``, ``ptx_coef``): which rows each update takes, the loss's value and gradient
against a hand-written NLL, what a run logs and learns with it, and the errors for bad settings and rows.

Two ranks against one process (DDP's averaging, the shard of each update's rows) are in ``test_distributed.py``
(the ``dapo_ptx_ga2`` case of ``dist_cases``).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.trainer.test_train import _config as _train_config
from trainer.config import ConfigError
from trainer.data import DataError
from trainer.distributed import Distributed
from trainer.metrics import read_metrics
from trainer.ptx import PtxColumns, PtxData, ptx_backward
from trainer.stand_in import StandInServer
from trainer.train import train


def _sft_rows(n: int) -> list[dict[str, str]]:
    return [
        {"prompt": f"What is {i % 7} plus {i % 5}?", "completion": f" <answer>{i % 7 + i % 5}</answer>"}
        for i in range(n)
    ]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _load(model_dir: Path, source: Path, batch_size: int, seed: int = 3) -> PtxData:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return PtxData.load(
        str(source),
        columns=PtxColumns("prompt", None, None),
        tokenizer=tokenizer,
        apply_chat_template=False,
        eos_token_id=int(tokenizer.eos_token_id),
        batch_size=batch_size,
        seed=seed,
        coef=0.3,
    )


def test_each_epoch_takes_every_row_once_in_a_fresh_order(tiny_model_dir: Path, tmp_path: Path) -> None:
    """5 rows, 2 per update: updates 0-4 take 10 rows, two whole epochs (update 2 straddles them), and the same
    update always takes the same rows (a resumed run draws what an uninterrupted one would)."""
    data = _load(tiny_model_dir, _write(tmp_path / "rows.jsonl", _sft_rows(5)), batch_size=2)
    ids = {id(e): i for i, e in enumerate(data.examples)}
    drawn = [ids[id(e)] for u in range(5) for e in data.rows_for(u)]
    assert len(drawn) == 10
    assert sorted(drawn[:5]) == [0, 1, 2, 3, 4] and sorted(drawn[5:]) == [0, 1, 2, 3, 4]
    assert drawn[:5] != drawn[5:]  # seed 3's two permutations differ
    assert [ids[id(e)] for e in data.rows_for(2)] == drawn[4:6]
    other_seed = _load(tiny_model_dir, tmp_path / "rows.jsonl", batch_size=2, seed=4)
    assert [r.completion_ids for u in range(3) for r in other_seed.rows_for(u)] != [
        r.completion_ids for u in range(3) for r in data.rows_for(u)
    ]


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_the_term_is_coef_times_the_token_mean_nll_of_the_completions(
    tiny_model_dir: Path, tmp_path: Path, parts: int
) -> None:
    """The gradient ptx_backward leaves equals the gradient of 0.3 x (summed log-loss of every completion token,
    EOS included, prompt and padding left out) / (their number), written out row by row here; the same whether
    the rows go through in one forward, in parts of 2 and 1 rows, or one row at a time."""
    data = _load(tiny_model_dir, _write(tmp_path / "rows.jsonl", _sft_rows(6)), batch_size=3)
    rows = data.rows_for(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    nll, tokens = ptx_backward(
        model,
        rows,
        pad_token_id=data.pad_token_id,
        coef=0.3,
        dist=Distributed(),
        device=torch.device("cpu"),
        parts=parts,
    )
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.zero_grad(set_to_none=True)
    by_hand, count = torch.zeros(()), 0
    for e in rows:  # one row at a time, no padding: position t predicts token t + 1
        ids = torch.tensor([e.prompt_ids + e.completion_ids])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)  # (L, V)
        p = len(e.prompt_ids)
        for j, token in enumerate(e.completion_ids):
            by_hand = by_hand - logp[p - 1 + j, token]
        count += len(e.completion_ids)
    (0.3 * by_hand / count).backward()

    assert tokens == count == sum(len(e.completion_ids) for e in rows)
    assert nll == pytest.approx(float(by_hand.detach()), rel=1e-5)
    assert nll / count > 1.0  # a random model: far from a solved task, so the check is not of a zero gradient
    assert set(got) == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-7, msg=name)


def test_a_run_logs_the_term_and_learns_the_rows(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """With every reward equal the policy term has no gradient (all advantages 0), so what moves the model is the
    ptx term alone: its loss falls step after step, and without pretrain_data the same run leaves the model as it
    was."""
    rows = _write(tmp_path / "rows.jsonl", _sft_rows(8))
    server = StandInServer(lambda item: 1.0)
    result = train(
        _train_config(
            tiny_model_dir,
            prompt_files,
            tmp_path / "ptx",
            max_steps=4,
            pretrain_data=str(rows),
            ptx_coef=1.0,
            ptx_batch_size=8,
        ),
        scorer=server.scorer(),
    )
    ptx = [r["loss/ptx"] for r in read_metrics(result.output_dir) if "loss/ptx" in r]
    assert len(ptx) == 4
    assert all(later < earlier for earlier, later in itertools.pairwise(ptx)), ptx
    assert ptx[0] > 1.0  # nats: the random start

    plain = train(_train_config(tiny_model_dir, prompt_files, tmp_path / "plain", max_steps=4), scorer=server.scorer())
    assert all("loss/ptx" not in r for r in read_metrics(plain.output_dir))
    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    unchanged = AutoModelForCausalLM.from_pretrained(plain.checkpoint).state_dict()
    moved = AutoModelForCausalLM.from_pretrained(result.checkpoint).state_dict()
    assert all(torch.equal(unchanged[k], v) for k, v in start.items())
    assert any(not torch.equal(moved[k], v) for k, v in start.items())


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"ptx_coef": 0.0}, "ptx_coef"), ({"ptx_coef": -0.1}, "ptx_coef"), ({"ptx_batch_size": 0}, "ptx_batch_size")],
)
def test_bad_settings_name_their_option(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        _train_config(tiny_model_dir, prompt_files, tmp_path / "x", pretrain_data=str(tmp_path / "r"), **overrides)
    _train_config(tiny_model_dir, prompt_files, tmp_path / "x", **overrides)  # without pretrain_data they are unused


def test_a_bad_row_fails_with_its_line_before_training(
    tiny_model_dir: Path, prompt_files: tuple[Path, Path], tmp_path: Path
) -> None:
    rows = _write(tmp_path / "rows.jsonl", [*_sft_rows(2), {"prompt": "What is 1 plus 1?"}])
    with pytest.raises(DataError, match=r"rows\.jsonl:3 has a 'prompt' but no 'completion'"):
        train(
            _train_config(tiny_model_dir, prompt_files, tmp_path / "run", pretrain_data=str(rows)),
            scorer=StandInServer().scorer(),
        )
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    with pytest.raises(DataError, match=r"missing\.jsonl"):
        train(
            _train_config(
                tiny_model_dir, prompt_files, tmp_path / "run2", pretrain_data=str(tmp_path / "missing.jsonl")
            ),
            scorer=StandInServer().scorer(),
        )


def test_each_rank_takes_its_share_of_an_update_rows(tiny_model_dir: Path, tmp_path: Path) -> None:
    """On two ranks each backward covers half the update's rows, and between them every row once."""
    data = _load(tiny_model_dir, _write(tmp_path / "rows.jsonl", _sft_rows(6)), batch_size=4)
    rows = data.rows_for(1)
    shares = [rows[Distributed(rank=r, world_size=2).shard(len(rows))] for r in (0, 1)]
    assert [len(s) for s in shares] == [2, 2]
    assert Counter(id(e) for s in shares for e in s) == Counter(id(e) for e in rows)
