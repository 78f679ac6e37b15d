#!/usr/bin/env bash
# DeepSeek-R1's recipe end to end on CPU, on arithmetic word problems, with the trainer's own commands:
#   0. data, tokenizer and a random tiny Qwen2 (prepare.py), and a reward server
#   1. cold-start SFT                      python -m trainer sft    (sft.yaml)
#   2. GRPO, outcome supervision           python -m trainer train  (grpo.yaml)
#   3. rejection sampling                  python -m trainer sample (sample.yaml)
#   4. SFT of the base model on the kept rows plus the cold-start rows
#   5. GRPO again, from phase 4
#   6. the comparison: phase 2 again with process supervision (step rewards), same budget, same start
# Held-out pass@1 (greedy, 200 problems) after each phase (pass1.yaml), the time of each phase, and a summary in
# $OUT/summary.json and $OUT/summary.md (summary.py).
#
# Usage (from anywhere): examples/arithmetic/run.sh
#   SEED=1 OUT=examples/arithmetic/runs/seed1 examples/arithmetic/run.sh      one seed of the 3-seed figures
#   SFT_STEPS=60 GRPO_STEPS=10 GRPO2_STEPS=5 SAMPLE_PROMPTS=64 ... run.sh     a short check of the pipeline
#   THREADS=1 ... run.sh       torch threads of the trainer (default 2, the reward server waits during SFT); give
#                              each run 1 when several seeds share the machine
#   SFT_SAVE_STEPS=250 ... run.sh   also keep the SFT phases' checkpoints every 250 steps (a learning curve)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # runs from a checkout without installing
SEED="${SEED:-0}"
OUT="${OUT:-examples/arithmetic/runs}"
PORT="${PORT:-8000}"
PYTHON="${PYTHON:-python}"
SFT_STEPS="${SFT_STEPS:-1000}"
GRPO_STEPS="${GRPO_STEPS:-60}"
GRPO2_STEPS="${GRPO2_STEPS:-30}"
SAMPLE_PROMPTS="${SAMPLE_PROMPTS:-1000}"
THREADS="${THREADS:-2}"
SFT_SAVE_STEPS="${SFT_SAVE_STEPS:-0}"
EX=examples/arithmetic
URL="reward_server_urls=[http://127.0.0.1:$PORT]"
mkdir -p "$OUT"
: > "$OUT/times.jsonl"

phase() {  # phase NAME COMMAND...: run it, append its wall-clock seconds to $OUT/times.jsonl
  local name=$1 start=$SECONDS
  shift
  echo "=== $name: $*"
  "$@"
  echo "{\"phase\": \"$name\", \"seconds\": $((SECONDS - start))}" >> "$OUT/times.jsonl"
}
trainer() { "$PYTHON" -m trainer "$@" --set progress_bar=false --set "torch_num_threads=$THREADS"; }
pass1() {  # pass1 NAME CHECKPOINT: held-out greedy pass@1 into $OUT/eval/NAME/summary.json
  trainer sample --config "$EX/pass1.yaml" --set "$URL" --set "model_name_or_path=$2" \
    --set "data=$OUT/data/test.jsonl" --set "output_dir=$OUT/eval/$1" > /dev/null
}

phase prepare "$PYTHON" "$EX/prepare.py" --out "$OUT" --seed "$SEED"

# The reward server, with one math worker so that trainer and verifier each have a core.
RLVR_MATH_WORKERS=1 "$PYTHON" -m reward_server --host 127.0.0.1 --port "$PORT" > "$OUT/reward_server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

grpo() {  # grpo NAME START_CHECKPOINT STEPS [--set ...]: GRPO from START into $OUT/NAME
  local name=$1 model=$2 steps=$3
  shift 3
  trainer train --config "$EX/grpo.yaml" --set "$URL" --set "model_name_or_path=$model" --set "max_steps=$steps" \
    --set "train_data=$OUT/data/train.jsonl" --set "eval_data=$OUT/data/test.jsonl" --set "output_dir=$OUT/$name" \
    --set "seed=$SEED" "$@"
}

phase sft trainer sft --config "$EX/sft.yaml" --set "model_name_or_path=$OUT/base" \
  --set "train_data=$OUT/data/cold_start.jsonl" --set "output_dir=$OUT/sft" --set "max_steps=$SFT_STEPS" \
  --set "seed=$SEED" --set "save_steps=$SFT_SAVE_STEPS"
phase eval_sft pass1 sft "$OUT/sft/checkpoint-$SFT_STEPS"

phase grpo grpo grpo "$OUT/sft/checkpoint-$SFT_STEPS" "$GRPO_STEPS"
phase eval_grpo pass1 grpo "$OUT/grpo/checkpoint-$GRPO_STEPS"

phase sample trainer sample --config "$EX/sample.yaml" --set "$URL" \
  --set "model_name_or_path=$OUT/grpo/checkpoint-$GRPO_STEPS" --set "data=$OUT/data/rejection.jsonl" \
  --set "output_dir=$OUT/sample" --set "max_prompts=$SAMPLE_PROMPTS" --set "seed=$SEED"

# R1 fine-tunes the base model (not the RL checkpoint) on the rejection-sampled set together with SFT data it
# already had (section 2.3.3: the RL checkpoint's verified samples plus reused DeepSeek-V3 SFT data); here the
# verified samples of problems the cold start did not hold, plus the cold-start rows.
cat "$OUT/data/cold_start.jsonl" "$OUT/sample/kept.jsonl" > "$OUT/data/sft2.jsonl"
phase sft2 trainer sft --config "$EX/sft.yaml" --set "model_name_or_path=$OUT/base" \
  --set "train_data=$OUT/data/sft2.jsonl" --set "output_dir=$OUT/sft2" --set "max_steps=$SFT_STEPS" \
  --set "seed=$SEED" --set "save_steps=$SFT_SAVE_STEPS"
phase eval_sft2 pass1 sft2 "$OUT/sft2/checkpoint-$SFT_STEPS"

phase grpo2 grpo grpo2 "$OUT/sft2/checkpoint-$SFT_STEPS" "$GRPO2_STEPS"
phase eval_grpo2 pass1 grpo2 "$OUT/grpo2/checkpoint-$GRPO2_STEPS"

# Process supervision (DeepSeekMath 4.1.3): the server checks each line of the working (a op b = c); a token's
# advantage sums the normalised rewards of the steps at or after it. Same start and budget as phase 2.
phase grpo_process grpo grpo_process "$OUT/sft/checkpoint-$SFT_STEPS" "$GRPO_STEPS" \
  --set advantage_estimator=process
phase eval_grpo_process pass1 grpo_process "$OUT/grpo_process/checkpoint-$GRPO_STEPS"

"$PYTHON" "$EX/summary.py" "$OUT"
