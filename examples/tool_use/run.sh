#!/usr/bin/env bash
# A tool worth learning, on CPU: three-digit multiplications a tiny model cannot do in its head but solves with one
# line of Python run by the reward server's sandbox.
#   0. data, tokenizer and a random tiny Qwen2 (prepare.py), and a reward server (it runs the tool and scores)
#   1. cold-start SFT: a share of the rows call the tool, the rest answer at once   python -m trainer sft (sft.yaml)
#   2. GRPO with the tool against the live server                                  python -m trainer train (grpo.yaml)
#      held-out greedy pass@1 with the tool (100 problems) at the start and every 10 steps; per step the trainer
#      logs tools/calls_per_completion, tools/error_rate, tools/wait_s
#   3. control (ARMS="grpo random_reward"): the same GRPO with each step's rewards shuffled across the batch
# The figures go to $OUT/summary.json (summary.py).
#
# Usage (from anywhere): examples/tool_use/run.sh
#   SEED=1 OUT=examples/tool_use/runs/seed1 PORT=8001 examples/tool_use/run.sh     one seed of the 3-seed figures
#   SFT_STEPS=20 RL_STEPS=2 EVAL_PROMPTS=8 ... run.sh                              a short check of the pipeline
#   TOOL_SHARE=0.3 ... run.sh                     share of cold-start rows that call the tool
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # runs from a checkout without installing
SEED="${SEED:-0}"
OUT="${OUT:-examples/tool_use/runs}"
PORT="${PORT:-8000}"
PYTHON="${PYTHON:-python}"
SFT_STEPS="${SFT_STEPS:-2000}"
RL_STEPS="${RL_STEPS:-30}"
ARMS="${ARMS:-grpo random_reward}"
TOOL_SHARE="${TOOL_SHARE:-0.3}"
EVAL_PROMPTS="${EVAL_PROMPTS:-null}"
EX=examples/tool_use
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
: > "$OUT/times.jsonl"

phase() {  # phase NAME COMMAND...: run it, append its wall-clock seconds to $OUT/times.jsonl
  local name=$1 start=$SECONDS
  shift
  echo "=== $name: $*"
  "$@"
  echo "{\"phase\": \"$name\", \"seconds\": $((SECONDS - start))}" >> "$OUT/times.jsonl"
}
trainer() { "$PYTHON" -m trainer "$@" --set progress_bar=false; }

phase prepare "$PYTHON" "$EX/prepare.py" --out "$OUT" --seed "$SEED" --tool-share "$TOOL_SHARE"

# One math worker, so that trainer and server each have a core; the same server runs the tool calls.
RLVR_MATH_WORKERS=1 "$PYTHON" -m reward_server --host 127.0.0.1 --port "$PORT" > "$OUT/reward_server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

phase sft trainer sft --config "$EX/sft.yaml" --set "model_name_or_path=$OUT/base" \
  --set "train_data=$OUT/data/cold_start.jsonl" --set "output_dir=$OUT/sft" --set "max_steps=$SFT_STEPS" \
  --set "seed=$SEED"

for arm in $ARMS; do
  case "$arm" in
    grpo) extra=() ;;
    random_reward) extra=(--set shuffle_rewards=true) ;;
    *) echo "unknown arm '$arm': choose from grpo random_reward" >&2; exit 2 ;;
  esac
  phase "$arm" trainer train --config "$EX/grpo.yaml" --set "reward_server_urls=[$URL]" \
    --set "model_name_or_path=$OUT/sft/checkpoint-$SFT_STEPS" --set "train_data=$OUT/data/train.jsonl" \
    --set "eval_data=$OUT/data/test.jsonl" --set "eval_max_prompts=$EVAL_PROMPTS" --set "output_dir=$OUT/$arm" \
    --set "max_steps=$RL_STEPS" --set "seed=$SEED" "${extra[@]}"
done

"$PYTHON" "$EX/summary.py" "$OUT"
