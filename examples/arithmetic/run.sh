#!/usr/bin/env bash
# The arithmetic GRPO example end to end on CPU: data + warm-up, a reward server, GRPO, curves.
# Usage (from anywhere): examples/arithmetic/run.sh        Outputs: examples/arithmetic/runs/
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # runs from a checkout without installing
OUT=examples/arithmetic/runs
PORT="${PORT:-8000}"
PYTHON="${PYTHON:-python}"

# 1. Tokenizer, tiny Qwen2, problems, and the short supervised warm-up (one torch thread: see the README).
"$PYTHON" examples/arithmetic/prepare.py --out "$OUT" --threads 1

# 2. The reward server, with one math worker so that trainer and verifier each have a core.
RLVR_MATH_WORKERS=1 "$PYTHON" -m reward_server --host 127.0.0.1 --port "$PORT" > "$OUT/reward_server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

# 3. GRPO (the trainer waits for the server's /readyz), then the curves.
START=$SECONDS
"$PYTHON" -m trainer train --config examples/arithmetic/grpo.yaml --set "reward_server_urls=[http://127.0.0.1:$PORT]"
echo "GRPO took $((SECONDS - START)) s (server start and evaluations included)"
"$PYTHON" -m trainer plot "$OUT/grpo"   # every metric, to $OUT/grpo/curves.png
"$PYTHON" -m trainer plot "$OUT/grpo" --out examples/arithmetic/curves.png \
  --metric eval/pass@1 --metric reward/accuracy --metric adv/frac_zero_std_groups --metric policy/entropy \
  --metric completions/mean_length --metric timing/step --metric timing/reward_wait_frac --metric perf/tokens_per_s
