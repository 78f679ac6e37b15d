#!/usr/bin/env bash
# Every GPU figure of the trainer in one run (within 10 minutes on one GPU):
#   1. the gpu-marked tests (bf16 autocast, gradient checkpointing, generation in the update's dtype, a CUDA step);
#   2. benchmarks/trainer_step.py --device cuda on a Qwen2-0.5B-shaped random model (151,936-token vocabulary),
#      once per generation backend: transformers (with the appending cache, then with cache_implementation static:
#      CUDA graphs), and vLLM when it is installed;
#   3. TRL's GRPOTrainer on the same model, batch and lengths (benchmarks/trl_step.py) when trl is installed;
#   4. completion tokens/s side by side, with the ratio to TRL;
#   5. generation alone (benchmarks/decode_cache.py, bf16): model.generate against the trainer's decode loops.
# Rewards come from an in-process stand-in rule in both trainers (no reward server needed): this measures the
# trainers, not the verifiers. On a machine without CUDA it stops at once with a clear message. A stage that fails
# does not stop the later ones (a GPU lease is short): the script names the failed stages at the end and exits 1.
#
#   benchmarks/gpu_check.sh            # PYTHON=... picks the interpreter (default python3)
#   GPU_CHECK_OUT=DIR benchmarks/gpu_check.sh   # keep each stage's JSON in DIR (default: a temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD:$PWD/clients${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "gpu_check: $PY cannot import torch; set PYTHON to the interpreter of the training environment" >&2
    exit 2
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False for $PY); run this on a GPU machine" >&2
    exit 2
fi
if ! missing="$("$PY" -c 'import trainer.train, trainer.stand_in' 2>&1)"; then
    echo "gpu_check: the trainer does not import with $PY (a missing dependency?):" >&2
    echo "$missing" | tail -n 3 >&2
    exit 2
fi
"$PY" -c 'import torch; print("gpu_check:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
"$PY" -c 'import transformers; print("gpu_check: transformers", transformers.__version__)'
if [ -n "${GPU_CHECK_OUT:-}" ]; then
    out="$GPU_CHECK_OUT"
    mkdir -p "$out"
else
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi
failed=()
stage() {  # stage NAME COMMAND...: run one stage; a failure is recorded, not fatal
    local name="$1"
    shift
    local start=$SECONDS
    if "$@"; then
        echo "gpu_check: $name passed in $((SECONDS - start)) s"
    else
        echo "gpu_check: $name FAILED (exit $?) after $((SECONDS - start)) s"
        failed+=("$name")
    fi
}

echo "== 1. gpu-marked tests"
stage "gpu tests" timeout 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/trainer/test_gpu.py

# Qwen2-0.5B's shape: 896 hidden, 24 layers, 14 heads (2 KV), 4864 MLP, 151,936 tokens (random weights).
shape=(--device cuda --hidden-size 896 --layers 24 --heads 14 --kv-heads 2 --intermediate-size 4864
       --vocab-size 151936 --prompts 16 --generations 8 --completion-length 256 --steps 3)

echo "== 2. trainer_step.py, transformers backend"
stage "trainer_step transformers" timeout 240 "$PY" benchmarks/trainer_step.py "${shape[@]}" --modes overlap \
    --rounds 1 --rewards stand-in --json "$out/transformers.json"
echo "== 2. trainer_step.py, transformers backend, cache_implementation static (CUDA graphs)"
stage "trainer_step static" timeout 240 "$PY" benchmarks/trainer_step.py "${shape[@]}" --modes overlap \
    --rounds 1 --rewards stand-in --cache-implementation static --json "$out/static.json"
echo "== 2. trainer_step.py, vllm backend"
if "$PY" -c 'import vllm' 2>/dev/null; then
    stage "trainer_step vllm" timeout 240 "$PY" benchmarks/trainer_step.py "${shape[@]}" --modes overlap \
        --rounds 1 --rewards stand-in --backend vllm --json "$out/vllm.json"
else
    echo "vllm: not installed (import vllm failed): no vLLM figure"
fi

echo "== 3. TRL GRPOTrainer, same model, batch and lengths"
if "$PY" -c 'import trl' 2>/dev/null; then
    stage "trl_step" timeout 240 "$PY" benchmarks/trl_step.py "${shape[@]}" --json "$out/trl.json"
else
    echo "trl: not installed (import trl failed): no TRL figure"
fi

echo "== 4. completion tokens/s"
"$PY" - "$out" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for name in ("transformers", "static", "vllm"):
    if (out / f"{name}.json").exists():
        rows[f"rlvr ({name})"] = json.loads((out / f"{name}.json").read_text())["modes"]["overlap"]["tokens_per_s"]
trl = json.loads((out / "trl.json").read_text())["tokens_per_s"] if (out / "trl.json").exists() else None
if trl is not None:
    rows["TRL GRPOTrainer"] = trl
for name, value in rows.items():
    ratio = f"x{value / trl:.2f} of TRL" if trl else "no TRL figure to compare"
    print(f"{name:<22} {value:9.0f} tokens/s   {ratio}")
PYEOF

echo "== 5. generation alone: model.generate and the trainer's decode loop, same shape, bf16 autocast"
stage "decode_cache" timeout 300 "$PY" benchmarks/decode_cache.py --device cuda --bf16 --hidden-size 896 --layers 24 \
    --heads 14 --kv-heads 2 --intermediate-size 4864 --vocab-size 151936 --prompts 16 --generations 8 \
    --completion-length 256 --rounds 2

if [ "${#failed[@]}" -gt 0 ]; then
    printf 'gpu_check: failed stages: %s\n' "$(IFS=,; echo "${failed[*]}")"
    exit 1
fi
