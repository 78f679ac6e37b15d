#!/usr/bin/env bash
# RL that visibly works, on CPU: the cold start learns the method on an easy regime with worked solutions; every RL
# arm then trains on a harder regime that has final answers only, from the same start, on the same prompts, with
# the same number of sampled completions (DeepSeekMath section 5.2's comparison, plus a random-reward control):
#   0. data, tokenizer and a random tiny Qwen2 (prepare.py), and a reward server
#   1. cold-start SFT on the easy regime             python -m trainer sft   (examples/arithmetic/sft.yaml)
#   2. grpo           GRPO, outcome supervision      python -m trainer train (grpo.yaml); every RL arm also keeps
#                     a supervised term on the cold start's own rows (PPO-ptx: pretrain_data, ptx_coef 1.0)
#   3. rft_online     online RFT: weight 1 for a verified completion, 0 otherwise, no baseline
#   4. rft_offline    offline RFT: sample once from the start, SFT on the verified samples (sample_rft, sft_rft)
#   5. random_reward  GRPO with each step's rewards shuffled across the batch (must not gain)
#      random_reward_group  the same control with rewards shuffled within each group: GRPO's own advantages, each
#                     on a random member of its group (not in the default ARMS)
#   6. process        GRPO with process supervision (each line of working checked by the server)
#   7. gspo, cispo, rloo  GRPO with GSPO's sequence ratio, CISPO's objective or RLOO's baseline (not in the default
#                     ARMS: ARMS="grpo gspo cispo rloo" runs them beside GRPO from the same start)
# After the start and each arm, on the 200 held-out hard problems: greedy pass@1 (pass1.yaml) and pass@1/pass@8
# of 8 samples at the training temperature (pass8.yaml); greedy pass@1 on the easy held-out set and on 1,000 more
# held-out hard problems too (HELDOUT_MORE). The figures go to $OUT/summary.json and $OUT/summary.md (summary.py).
#
# Usage (from anywhere): examples/rl_gain/run.sh
#   SEED=1 OUT=examples/rl_gain/runs/seed1 PORT=8001 examples/rl_gain/run.sh     one seed of the 3-seed figures
#   SFT_STEPS=60 RL_STEPS=4 ARMS="grpo random_reward" ... run.sh                 a short check of the pipeline
#   COLD_START=path/to/checkpoint ... run.sh       skip the cold-start SFT and use that checkpoint instead
#   ARMS="" ... run.sh                             the cold start and the start's evaluation only (no RL arm)
#   EVAL_PROMPTS=20 ... run.sh                     evaluate on the first 20 held-out problems only (a check)
#   THREADS=1 ... run.sh                           torch threads of the trainer (default 1: fastest for this model
#                                                  on a shared 2-core machine)
#   JOBS=1 ... run.sh                              arms at a time (default: the CPU count; above 1 each arm's
#                                                  output goes to $OUT/logs/ARM.log)
#   HELDOUT_MORE=0 ... run.sh                      no greedy pass@1 on more held-out problems (default 1000:
#                                                  train.jsonl's last rows, which no RL epoch reaches)
#   CALIBRATION_PROMPTS=32 ... run.sh              RL prompts the new verbs' start is calibrated on (default 128;
#                                                  each new verb needs some)
#   SPREAD=0 CALIBRATION_PROMPTS=64 ... run.sh     one row shared by all new verbs, calibrated together (the
#                                                  default until 2026-12-04; default SPREAD=1: each new verb its own
#                                                  row and its own calibration, new_words.py --spread)
#   LEAN=0.25 ... run.sh                           half the new verbs start at a + share of 0.75, half at 0.25
#                                                  (which half from SEED, not from their meaning; --lean)
#   RL_SETS="beta=0.0" ... run.sh                  extra --set options for every RL arm (space-separated key=value;
#                                                  beta=0.0 is the no-KL setting of the docs' second table)
#   RL_SETS="pretrain_data=null" ... run.sh        the RL arms without the PPO-ptx anchor on the cold start's rows
#                                                  (grpo.yaml's ptx_coef: 1.0; the default until 2026-12-05)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # runs from a checkout without installing
SEED="${SEED:-0}"
OUT="${OUT:-examples/rl_gain/runs}"
PORT="${PORT:-8000}"
PYTHON="${PYTHON:-python}"
SFT_STEPS="${SFT_STEPS:-1000}"
RL_STEPS="${RL_STEPS:-80}"
ARMS="${ARMS-grpo random_reward rft_online rft_offline process}"  # ARMS="" runs the cold start and the start only
THREADS="${THREADS:-1}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 1)}"
EVAL_PROMPTS="${EVAL_PROMPTS:-null}"
COLD_START="${COLD_START:-}"
RL_SETS="${RL_SETS:-}"
read -r -d "" -a RL_PAIRS <<< "$RL_SETS" || true  # split once on whitespace, no globbing: checked below, then every arm
CALIBRATION_PROMPTS="${CALIBRATION_PROMPTS:-128}"
SPREAD="${SPREAD:-1}"
LEAN="${LEAN:-0}"
HELDOUT_MORE="${HELDOUT_MORE:-1000}"
EX=examples/rl_gain
URL="reward_server_urls=[http://127.0.0.1:$PORT]"
KNOWN_ARMS=" grpo rft_online rft_offline random_reward random_reward_group process gspo cispo rloo "
for arm in $ARMS; do  # before anything runs: a misspelt arm should not cost a cold start
  if [[ "$KNOWN_ARMS" != *" $arm "* ]]; then
    echo "unknown arm '$arm': choose from$KNOWN_ARMS" >&2
    exit 2
  fi
done
if ! [[ "$JOBS" =~ ^[1-9][0-9]*$ ]]; then
  echo "JOBS=$JOBS: the number of arms to run at a time, a whole number from 1" >&2
  exit 2
fi
if ! [[ "$HELDOUT_MORE" =~ ^[0-9]+$ ]]; then
  echo "HELDOUT_MORE=$HELDOUT_MORE: the number of extra held-out problems, a whole number (0: none)" >&2
  exit 2
fi
# RL_SETS checked against grpo.yaml the way the trainer reads them: a misspelt or invalid option (a typo, a value
# the trainer refuses) should not cost a cold start either. What only shows once things load (a model path) is not.
"$PYTHON" - "$EX/grpo.yaml" "${RL_PAIRS[@]}" <<'PY' || exit 2
import sys
from trainer.config import CONFIG_CLASSES, ConfigError, load_config, parse_overrides
try:
    load_config(sys.argv[1], parse_overrides(sys.argv[2:]), cls=CONFIG_CLASSES["train"])
except ConfigError as exc:
    sys.exit(f"RL_SETS: config error: {exc}")
PY
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
evaluate() {  # evaluate NAME CHECKPOINT: held-out figures into $OUT/eval/NAME{,_t1,_easy,_more}/summary.json
  local common=(--set "$URL" --set "model_name_or_path=$2" --set "max_prompts=$EVAL_PROMPTS")
  trainer sample --config "$EX/pass1.yaml" "${common[@]}" --set "data=$OUT/data/test.jsonl" \
    --set "output_dir=$OUT/eval/$1" --set save_samples=true > /dev/null
  trainer sample --config "$EX/pass8.yaml" "${common[@]}" --set "data=$OUT/data/test.jsonl" --set "seed=$SEED" \
    --set "output_dir=$OUT/eval/${1}_t1" --set save_samples=true > /dev/null
  trainer sample --config "$EX/pass1.yaml" "${common[@]}" --set "data=$OUT/data/easy_test.jsonl" \
    --set "output_dir=$OUT/eval/${1}_easy" > /dev/null
  if [ -s "$OUT/data/test_more.jsonl" ]; then
    trainer sample --config "$EX/pass1.yaml" "${common[@]}" --set "data=$OUT/data/test_more.jsonl" \
      --set "output_dir=$OUT/eval/${1}_more" > /dev/null
  fi
}
rl() {  # rl NAME [--set ...]: an RL arm from the start into $OUT/NAME, then its evaluation
  local name=$1 extra=() kv
  shift
  for kv in "${RL_PAIRS[@]}"; do extra+=(--set "$kv"); done
  phase "$name" trainer train --config "$EX/grpo.yaml" --set "$URL" --set "model_name_or_path=$START" \
    --set "max_steps=$RL_STEPS" --set "train_data=$OUT/data/rl_prompts.jsonl" --set "eval_data=$OUT/data/test.jsonl" \
    --set "output_dir=$OUT/$name" --set "seed=$SEED" --set log_grad_cosine=true \
    --set "pretrain_data=$OUT/data/cold_start.jsonl" --set "eval_max_prompts=$EVAL_PROMPTS" "${extra[@]}" "$@"
  phase "eval_$name" evaluate "$name" "$OUT/$name/checkpoint-$RL_STEPS"
}

phase prepare "$PYTHON" "$EX/prepare.py" --out "$OUT" --seed "$SEED"
# The prompts every arm sees: RL_STEPS steps of prompt_batch_size prompts (one epoch of rl_prompts.jsonl), each with
# num_generations completions; the RL arms update num_iterations times a step, offline RFT as many times.
PROMPTS_PER_STEP=$(sed -n 's/^prompt_batch_size: *//p' "$EX/grpo.yaml")
ITERATIONS=$(sed -n 's/^num_iterations: *//p' "$EX/grpo.yaml")
RL_PROMPTS=$((RL_STEPS * PROMPTS_PER_STEP))
head -n "$RL_PROMPTS" "$OUT/data/train.jsonl" > "$OUT/data/rl_prompts.jsonl"
# Greedy pass@1 on HELDOUT_MORE more held-out problems as well: a difference between two checkpoints on the 200 of
# test.jsonl has a noise of about 3 points (the problems that flip either way), the size of the control's bound.
# They are the last rows of train.jsonl, which no arm's epoch of RL prompts reaches.
rm -f "$OUT/data/test_more.jsonl"
if [ "$HELDOUT_MORE" -gt 0 ]; then
  if [ $((RL_PROMPTS + HELDOUT_MORE)) -gt "$(wc -l < "$OUT/data/train.jsonl")" ]; then
    echo "HELDOUT_MORE=$HELDOUT_MORE: with $RL_PROMPTS RL prompts, more than train.jsonl holds" >&2
    exit 2
  fi
  tail -n "$HELDOUT_MORE" "$OUT/data/train.jsonl" > "$OUT/data/test_more.jsonl"
fi

# The reward server, with one math worker so that trainer and verifier each have a core.
RLVR_MATH_WORKERS=1 "$PYTHON" -m reward_server --host 127.0.0.1 --port "$PORT" > "$OUT/reward_server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

if [ -z "$COLD_START" ]; then
  phase sft trainer sft --config examples/arithmetic/sft.yaml --set "model_name_or_path=$OUT/base" \
    --set "train_data=$OUT/data/cold_start.jsonl" --set "output_dir=$OUT/sft" --set "max_steps=$SFT_STEPS" \
    --set "seed=$SEED"
  COLD_START="$OUT/sft/checkpoint-$SFT_STEPS"
fi
# The new verbs start between the known + and - verbs' embeddings, each its own row, calibrated on the RL prompts
# (no answers) so that the start writes either operation equally often for each verb (new_words.py says why); this
# is every arm's start.
START="$OUT/start"
phase new_words "$PYTHON" "$EX/new_words.py" "$COLD_START" "$START" --prompts "$OUT/data/rl_prompts.jsonl" \
  --calibration-prompts "$CALIBRATION_PROMPTS" --seed "$SEED" --spread "$SPREAD" --lean "$LEAN"
phase eval_start evaluate start "$START"

run_arm() {  # run_arm ARM: one arm from the start (its training, then its evaluation)
  case "$1" in
    grpo) rl grpo ;;
    rft_online) rl rft_online --set advantage_estimator=rft ;;
    random_reward) rl random_reward --set shuffle_rewards=batch ;;
    random_reward_group) rl random_reward_group --set shuffle_rewards=group ;;
    process) rl process --set advantage_estimator=process ;;
    # issue 22's objectives, each GRPO with one thing changed: GSPO's sequence ratio (with its paper's clip range and
    # per-completion mean), CISPO's clipped weight (ScaleRL's cap 5), RLOO's leave-one-out baseline
    gspo) rl gspo --set importance_sampling_level=sequence --set loss_type=grpo --set epsilon=3e-4 \
      --set epsilon_high=4e-4 ;;
    cispo) rl cispo --set loss_type=cispo --set epsilon_high=5.0 ;;
    rloo) rl rloo --set advantage_estimator=rloo ;;
    rft_offline)
      phase rft_offline_sample trainer sample --config "$EX/sample_rft.yaml" --set "$URL" \
        --set "model_name_or_path=$START" --set "data=$OUT/data/rl_prompts.jsonl" --set "seed=$SEED" \
        --set "max_prompts=$RL_PROMPTS" --set "output_dir=$OUT/rft_offline_sample"
      if [ -s "$OUT/rft_offline_sample/kept.jsonl" ]; then
        phase rft_offline trainer sft --config "$EX/sft_rft.yaml" --set "model_name_or_path=$START" \
          --set "train_data=$OUT/rft_offline_sample/kept.jsonl" --set "output_dir=$OUT/rft_offline" \
          --set "max_steps=$((RL_STEPS * ITERATIONS))" --set "seed=$SEED"
        phase eval_rft_offline evaluate rft_offline "$OUT/rft_offline/checkpoint-$((RL_STEPS * ITERATIONS))"
      else  # no verified sample: SFT on nothing leaves the start as it is
        echo "=== rft_offline: no verified sample to train on; the arm is the start"
        phase eval_rft_offline evaluate rft_offline "$START"
      fi
      ;;
  esac
}

# The arms are independent (each reads the start and writes its own directory), so they run JOBS at a time: each
# trainer takes THREADS threads, and the reward server's checks are light beside them (one trainer alone leaves a
# core of two idle). A run's figures do not depend on JOBS (one thread a trainer, the same seed); its times do.
if [ "$JOBS" -le 1 ]; then
  for arm in $ARMS; do run_arm "$arm"; done
else
  mkdir -p "$OUT/logs"
  echo "=== arms, $JOBS at a time: $ARMS (each one's output in $OUT/logs/ARM.log)"
  running_arms() { jobs -rp | grep -cvx "$SERVER"; }  # background jobs but the reward server
  for arm in $ARMS; do
    while [ "$(running_arms)" -ge "$JOBS" ]; do wait -n || true; done
    rm -f "$OUT/logs/$arm.rc"
    { set +e; (set -e; run_arm "$arm") > "$OUT/logs/$arm.log" 2>&1; echo $? > "$OUT/logs/$arm.rc"; } &
  done
  while [ "$(running_arms)" -gt 0 ]; do wait -n || true; done
  failed=""
  for arm in $ARMS; do
    [ "$(cat "$OUT/logs/$arm.rc" 2>/dev/null)" = 0 ] || failed="$failed $arm"
  done
  if [ -n "$failed" ]; then
    echo "arms failed:$failed (see $OUT/logs/ARM.log)" >&2
    exit 1
  fi
fi

"$PYTHON" "$EX/summary.py" "$OUT"
