"""The policy's weights as others need them: LoRA adapters (peft), the merged model, and ``(name, tensor)`` pairs
for an inference engine.

* :func:`apply_lora` wraps the policy in peft LoRA adapters (TRL's option names: ``use_peft``, ``lora_r``,
  ``lora_alpha``, ``lora_dropout``, ``lora_target_modules``); :func:`load_lora` resumes them from a checkpoint.
* :func:`reference_context`: with LoRA the reference model is the base with the adapter disabled, not a second
  copy in memory.
* :func:`engine_weights` yields what a generation engine (vLLM) loads after each optimizer step: the base model's
  parameter names, with every LoRA adapter merged in.
* :func:`merge_adapter` writes a LoRA checkpoint as one plain model (``python -m trainer merge``).

peft is imported only when LoRA is used.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.config import ConfigError, GRPOConfig
from trainer.distributed import unwrap

#: peft's prefix of the wrapped model's names (``PeftModelForCausalLM.base_model.model``).
_PEFT_PREFIX = "base_model.model."


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise ConfigError("use_peft: true needs peft: pip install peft (it is in the train extra)") from exc
    return peft


def is_peft(model: nn.Module) -> bool:
    """True when ``model`` (or the module inside its DDP wrapper) is a peft model."""
    return hasattr(unwrap(model), "peft_config")


def forward_module(model: nn.Module) -> nn.Module:
    """The transformers model that forwards run on: ``model`` itself, or for a peft model its base model, which
    holds the LoRA layers. peft's own forward calls the base's ``forward`` directly, past the hooks that FSDP2
    puts on the module it shards, so the loop shards and calls the base."""
    inner = unwrap(model)
    return inner.get_base_model() if is_peft(inner) else model  # type: ignore[operator]


def apply_lora(model: nn.Module, config: GRPOConfig) -> nn.Module:
    """Wrap ``model`` in fresh LoRA adapters as ``config`` says; only the adapters are trainable afterwards.

    Raises:
        ConfigError: peft is not installed, or ``lora_target_modules`` names no module of the model.
    """
    peft = _peft()
    targets: Any = config.lora_target_modules
    if targets is not None:
        targets = "all-linear" if targets == ("all-linear",) else list(targets)
    lora = peft.LoraConfig(
        task_type="CAUSAL_LM",
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
    )
    try:
        # The same adapters on every rank (whose RNGs differ), and the same for any number of ranks.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            return peft.get_peft_model(model, lora)
    except ValueError as exc:  # "Target modules {...} not found in the base model"
        raise ConfigError(f"lora_target_modules={config.lora_target_modules!r}: {exc}") from exc


def load_lora(model: nn.Module, checkpoint: Path) -> nn.Module:
    """``model`` (the base) with the trainable adapter stored in ``checkpoint`` (a resume)."""
    peft = _peft()
    return peft.PeftModel.from_pretrained(model, str(checkpoint), is_trainable=True)


def reference_context(model: nn.Module) -> contextlib.AbstractContextManager[Any]:
    """Inside, a peft ``model`` computes with its adapters disabled: the base, i.e. the LoRA run's reference."""
    return unwrap(model).disable_adapter()  # type: ignore[operator]


def engine_weights(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights as an inference engine loads them, one ``(name, tensor)`` pair at a time.

    Names are the base model's, as in the ``model.safetensors`` of a full checkpoint (``model.layers.0.mlp.
    up_proj.weight``; a tied ``lm_head.weight`` appears too). With LoRA each adapted weight comes merged,
    ``W + scaling * B @ A`` (peft's ``scaling = lora_alpha / r``), computed on the fly: the model itself is not
    changed, so merging never accumulates rounding into the trained weights; the adapter matrices are not
    yielded. Tensors are detached, on the model's device, in its master dtype (float32); under FSDP each is
    gathered whole in turn, a collective, so every rank must iterate the generator to its end in step.

    Call it after each optimizer step, e.g. the vLLM backend's weight sync::

        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": engine_weights(policy)})

    Args:
        model: the policy: a transformers model, a peft model, or either inside DDP or FSDP2.

    Raises:
        ValueError: a peft adapter other than plain LoRA (DoRA, embedding adapters) that cannot be merged here.
    """
    module = unwrap(model)
    state = module.state_dict()
    if not is_peft(module):
        for name, tensor in state.items():
            yield name, _whole(tensor)
        return
    lora_layers = _lora_layers(module)
    for name, tensor in state.items():
        if ".lora_" in name:
            if ".lora_A." in name or ".lora_B." in name:
                continue
            raise ValueError(f"{name}: only plain LoRA adapters can be merged for the engine")
        owner, _, leaf = name.rpartition(".base_layer.")
        if owner and owner in lora_layers and leaf == "weight":
            yield _base_name(owner + "." + leaf), _merged(state, owner, _whole(tensor), lora_layers[owner])
        else:
            yield _base_name(name.replace(".base_layer.", ".")), _whole(tensor)


def _lora_layers(model: nn.Module) -> dict[str, tuple[str, float, bool]]:
    """``{module name: (active adapter, scaling, fan_in_fan_out)}`` of every LoRA layer."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, m in model.named_modules():
        if isinstance(m, LoraLayer) and not getattr(m, "disable_adapters", False):
            for adapter in m.active_adapters:
                if adapter in m.lora_A:
                    out[name] = (adapter, float(m.scaling[adapter]), bool(getattr(m, "fan_in_fan_out", False)))
    return out


def _merged(
    state: dict[str, torch.Tensor], owner: str, weight: torch.Tensor, layer: tuple[str, float, bool]
) -> torch.Tensor:
    adapter, scaling, fan_in_fan_out = layer
    a = _whole(state[f"{owner}.lora_A.{adapter}.weight"]).to(weight.dtype)  # (r, in)
    b = _whole(state[f"{owner}.lora_B.{adapter}.weight"]).to(weight.dtype)  # (out, r)
    delta = (b @ a) * scaling  # (out, in)
    return weight + (delta.T if fan_in_fan_out else delta)


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # an FSDP2 shard: gather it
    return full.detach()


def _base_name(name: str) -> str:
    return name[len(_PEFT_PREFIX) :] if name.startswith(_PEFT_PREFIX) else name


def merge_adapter(checkpoint: str | Path, output_dir: str | Path, base_model: str | None = None) -> Path:
    """Write ``checkpoint``'s LoRA adapter merged into its base as one model that loads with ``from_pretrained``
    (and in vLLM or any server), with the checkpoint's tokenizer.

    Args:
        checkpoint: a LoRA checkpoint (``adapter_config.json`` and ``adapter_model.safetensors``).
        output_dir: where to write the merged model.
        base_model: the base model; ``None`` takes ``base_model_name_or_path`` from ``adapter_config.json``.

    Raises:
        ConfigError: ``checkpoint`` holds no adapter, peft is missing, or the base does not load.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    adapter_config = checkpoint / "adapter_config.json"
    if not adapter_config.exists():
        raise ConfigError(f"{checkpoint} holds no LoRA adapter (adapter_config.json is missing)")
    base = base_model or json.loads(adapter_config.read_text())["base_model_name_or_path"]
    peft = _peft()
    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"base model {base!r} does not load: {exc}; pass it with --base-model") from exc
    merged = peft.PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    merged.save_pretrained(output_dir)
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(output_dir)
    return output_dir


__all__ = [
    "apply_lora",
    "engine_weights",
    "forward_module",
    "is_peft",
    "load_lora",
    "merge_adapter",
    "reference_context",
]
