"""Our policy objectives against TRL 1.16's own ``GRPOTrainer._compute_loss`` on the same tensors (issue 22).

``_compute_loss`` is called unbound on a stand-in trainer that has the attributes it reads: its one model call,
``_get_per_token_logps_and_entropies``, returns the log-probs this test builds from a leaf tensor, so TRL's loss
and ours are functions of the same parameters, and their values and gradients (``torch.autograd.grad``) are
compared. The batches have a null row (mask all 0, advantage 0), a zero-spread group (advantage 0), a truncated row
(every position counted) and short rows. Only ``trainer.algorithms.*`` is imported (torch alone).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from trl.trainer.grpo_trainer import GRPOTrainer

from trainer.algorithms.entropy import high_entropy_mask
from trainer.algorithms.losses import PolicyOptions, grpo_loss

B, T, MAX_LEN, GA = 6, 5, 5, 2
EPSILON, EPSILON_HIGH, BETA = 0.2, 0.28, 0.04
#: row lengths: 5 is a truncated row (every position counts), 0 a null reward left out of the loss
LENGTHS = [3, 5, 0, 2, 4, 5]
#: one advantage per row: rows 2 (null) and 3 (a group of equal rewards) get 0
ADVANTAGES = [0.9, -1.1, 0.0, 0.0, -0.4, 1.3]


def _batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T) < torch.tensor(LENGTHS).unsqueeze(-1)).float()  # (B, T)
    theta = torch.randn(B, T, generator=g, dtype=torch.float64).requires_grad_()  # the "parameters"
    logp_now = -torch.nn.functional.softplus(theta.detach())
    old = logp_now + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 1.2  # ratios in ~[0.55, 1.8]
    return {
        "theta": theta,
        "mask": mask,
        "old": old,
        "ref": logp_now + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 0.8,
        "sampling": logp_now + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.3) * 0.6,
        "is_ratio": torch.where(mask.bool(), 0.5 + 1.5 * torch.rand(B, T, generator=g, dtype=torch.float64), 1.0),
        "advantages": torch.tensor(ADVANTAGES, dtype=torch.float64),
        # one per token (process supervision), 0 on the null and zero-spread rows
        "token_advantages": torch.randn(B, T, generator=g, dtype=torch.float64)
        * (torch.tensor(ADVANTAGES) != 0).unsqueeze(-1),
        # per-token entropies (nats) for top_entropy_quantile; a tie at one value, as low-entropy tokens often are
        "entropy": torch.where(
            torch.arange(B * T).reshape(B, T) % 4 == 0,
            torch.tensor(0.25, dtype=torch.float64),
            3 * torch.rand(B, T, generator=g, dtype=torch.float64),
        ),
    }


def _logp(theta: torch.Tensor) -> torch.Tensor:
    return -torch.nn.functional.softplus(theta)  # (B, T) log-probs < 0, differentiable in theta


def _trl_loss(batch: dict[str, torch.Tensor], case: dict[str, Any]) -> torch.Tensor:
    """TRL's ``_compute_loss`` on a stand-in trainer whose model call returns ``_logp(theta)``."""
    options: PolicyOptions = case["options"]
    # TRL's args: the same option names; one generation batch per optimizer step (TRL's default)
    args = SimpleNamespace(**dataclasses.asdict(options), steps_per_generation=GA)
    accelerator = SimpleNamespace(
        num_processes=1,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction: x,
        pad_across_processes=lambda x, dim, pad_index: x,
        sync_gradients=True,
    )
    entropies = batch["entropy"]
    trainer = SimpleNamespace(
        get_high_entropy_mask=lambda e, m, q: GRPOTrainer.get_high_entropy_mask(trainer, e, m, q),
        _get_per_token_logps_and_entropies=lambda *a, **k: (_logp(batch["theta"]), entropies, None),
        aux_loss_enabled=False,
        top_entropy_quantile=options.top_entropy_quantile,
        off_policy_mask_threshold=options.off_policy_mask_threshold,
        get_off_policy_mask=GRPOTrainer.get_off_policy_mask,
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
        importance_sampling_level=options.importance_sampling_level,
        beta=case["beta"],
        args=args,
        loss_type=case["loss_type"],
        epsilon_low=EPSILON,
        epsilon_high=case["epsilon_high"],
        use_vllm=case["vllm"],
        vllm_importance_sampling_correction=case["vllm"],
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=GA,
        max_completion_length=MAX_LEN,
        accelerator=accelerator,
        _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    inputs: dict[str, torch.Tensor] = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": batch["mask"],
        "advantages": batch[case["advantages"]],
        "old_per_token_logps": batch["old"],
        "ref_per_token_logps": batch["ref"],
        "num_items_in_batch": batch["mask"].sum(),
    }
    if case["vllm"]:
        inputs["importance_sampling_ratio"] = batch["is_ratio"]
        inputs["sampling_per_token_logps"] = batch["sampling"]
    return GRPOTrainer._compute_loss(trainer, None, inputs)


def _our_loss(batch: dict[str, torch.Tensor], case: dict[str, Any]) -> torch.Tensor:
    out = grpo_loss(
        _logp(batch["theta"]),
        batch["old"],
        batch[case["advantages"]],
        batch["mask"],
        loss_type=case["loss_type"],
        epsilon=EPSILON,
        epsilon_high=case["epsilon_high"],
        beta=case["beta"],
        ref_logp=batch["ref"],
        max_completion_length=MAX_LEN,
        num_items_in_batch=batch["mask"].sum(),
        gradient_accumulation_steps=GA,
        importance_weights=batch["is_ratio"] if case["vllm"] else None,
        options=case["options"],
        sampling_logp=batch["sampling"] if case["vllm"] else None,
        token_mask=high_entropy_mask(batch["entropy"], batch["mask"], case["options"].top_entropy_quantile),
    )
    return out.loss


def _cases() -> list[Any]:
    cases = []
    losses = ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"]
    extras = {
        "plain": {},
        "kl": {"beta": BETA, "use_bias_correction_kl": False},
        "kl_bias_corrected": {"beta": BETA, "use_bias_correction_kl": True},
        "two_sided": {"delta": 1.3},
        "off_policy_vllm": {"off_policy_mask_threshold": 0.02, "vllm": True},
        "top_entropy": {"top_entropy_quantile": 0.4},
        "top_entropy_kl_vllm": {"top_entropy_quantile": 0.2, "beta": BETA, "vllm": True},
    }
    for loss_type, level, (extra_name, extra) in itertools.product(losses, ("token", "sequence"), extras.items()):
        if loss_type == "vespo" and level == "sequence":
            continue  # TRL: VESPO computes its sequence weight itself, from token ratios
        if extra_name == "two_sided" and loss_type in ("cispo", "sapo", "vespo"):
            continue  # delta bounds the clipped surrogate only
        option_fields = {k: v for k, v in extra.items() if k not in ("beta", "vllm")}
        case = {
            "loss_type": loss_type,
            "beta": extra.get("beta", 0.0),
            "vllm": extra.get("vllm", False),
            "epsilon_high": 1.3 if loss_type == "cispo" else EPSILON_HIGH,  # CISPO's cap of the weight itself
            "options": PolicyOptions(importance_sampling_level=level, **option_fields),
        }
        cases.append(pytest.param({**case, "advantages": "advantages"}, id=f"{loss_type}-{level}-{extra_name}"))
        if extra_name in ("plain", "off_policy_vllm", "top_entropy"):
            per_token = {**case, "advantages": "token_advantages"}
            cases.append(pytest.param(per_token, id=f"{loss_type}-{level}-{extra_name}-per_token_advantages"))
    return cases


@pytest.mark.parametrize("case", _cases())
@pytest.mark.parametrize("seed", [0, 1])
def test_the_loss_and_its_gradient_equal_trls_compute_loss(case: dict[str, Any], seed: int) -> None:
    batch = _batch(seed)
    theirs = _trl_loss(batch, case)
    (their_grad,) = torch.autograd.grad(theirs, batch["theta"])
    ours = _our_loss(batch, case)
    (our_grad,) = torch.autograd.grad(ours, batch["theta"])
    # float32 precision on float64 tensors: TRL's SAPO temperatures are float32 scalars (1.05 is 1.0499999523)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-6, atol=1e-9)
    assert their_grad.abs().sum() > 0  # the case trains on something
    assert torch.equal(our_grad[2], torch.zeros(T, dtype=torch.float64))  # the null row gets no gradient


def test_the_batches_exercise_the_clip_the_cap_and_the_mask() -> None:
    """The hand-made batches reach the regions the objectives differ in (else equality would prove little)."""
    batch = _batch(0)
    ratio = torch.exp(_logp(batch["theta"]).detach() - batch["old"])[batch["mask"].bool()]
    assert (ratio > 1 + EPSILON_HIGH).any() and (ratio < 1 - EPSILON).any() and (ratio > 1.3).any()
    keep = GRPOTrainer.get_off_policy_mask(
        batch["advantages"].unsqueeze(-1), _logp(batch["theta"]), batch["sampling"], batch["mask"], 0.02
    )
    assert 0 < keep.sum() < B  # some negative-advantage rows dropped, not all


@pytest.mark.parametrize("quantile", [0.0, 0.2, 0.5, 0.999, 1.0])
def test_the_high_entropy_mask_equals_trls(quantile: float) -> None:
    """``top_entropy_quantile``'s mask against TRL's ``get_high_entropy_mask`` (which takes ``1 - quantile``),
    with padding and a tie; 1.0 keeps every counted token and 0.0 only those at the maximum."""
    batch = _batch(3)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(pad_across_processes=lambda x, dim, pad_index: x, gather=lambda x: x)
    )
    theirs = GRPOTrainer.get_high_entropy_mask(trainer, batch["entropy"], batch["mask"], 1 - quantile)
    ours = high_entropy_mask(batch["entropy"], batch["mask"], quantile)
    assert torch.equal(ours, theirs)
    counted = int(batch["mask"].sum())
    assert int(ours.sum()) == {1.0: counted, 0.0: 1}.get(quantile, int(ours.sum()))
    assert 0 < int(ours.sum()) <= counted
