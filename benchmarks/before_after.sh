#!/usr/bin/env bash
# A change that should move no figure (a refactor, a move of modules), measured in one run: the math throughput
# and the trainer step benchmarks on two checkouts, alternated round by round so that a change in the machine's
# load moves both sides. Prints each round's figures and the after/before ratios.
#
# Usage: benchmarks/before_after.sh BEFORE_DIR AFTER_DIR [ROUNDS]
#   BEFORE_DIR, AFTER_DIR: two checkouts of the project (e.g. `git worktree add --detach /tmp/before <commit>`)
#   ROUNDS: rounds of each benchmark on each side (default 2)
# Environment: PYTHON (default python), PROBLEMS (MATH-500 problems of the math benchmark, default 100),
# STEPS (measured trainer steps a run, default 3).
set -euo pipefail
BEFORE=$(cd "$1" && pwd)
AFTER=$(cd "$2" && pwd)
ROUNDS="${3:-2}"
PYTHON="${PYTHON:-python}"
PROBLEMS="${PROBLEMS:-100}"
STEPS="${STEPS:-3}"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

run() {  # run SIDE DIR ROUND: both benchmarks from DIR, each side's own code on its own sys.path
  local side=$1 dir=$2 round=$3
  (cd "$dir" && PYTHONPATH="$dir:$dir/clients" "$PYTHON" benchmarks/math_throughput.py --problems "$PROBLEMS") \
    > "$OUT/math-$side-$round.txt"
  (cd "$dir" && PYTHONPATH="$dir:$dir/clients" "$PYTHON" benchmarks/trainer_step.py --steps "$STEPS" --rounds 1 --chunk 4 \
    --modes overlap --json "$OUT/step-$side-$round.json") > /dev/null
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  run before "$BEFORE" "$round"
  run after "$AFTER" "$round"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" "$ROUNDS" <<'PY'
import json
import re
import statistics
import sys
from pathlib import Path

out, rounds = Path(sys.argv[1]), int(sys.argv[2])


def math_rate(side: str, r: int) -> float:
    """The server's items/s with one request in flight, from math_throughput.py's report."""
    text = (out / f"math-{side}-{r}.txt").read_text()
    m = re.search(r"rlvr\s+1 request in flight\s*:\s*([\d.]+) items/s", text)
    if m is None:
        raise SystemExit(f"no 'rlvr 1 request in flight' line in math-{side}-{r}.txt:\n{text}")
    return float(m.group(1))


def step_s(side: str, r: int) -> float:
    modes = json.loads((out / f"step-{side}-{r}.json").read_text())["modes"]
    return float(modes["overlap"]["step_s"])


rows = {"math items/s (server, 1 request in flight)": math_rate, "trainer step s (overlap)": step_s}
for name, read in rows.items():
    before = [read("before", r) for r in range(1, rounds + 1)]
    after = [read("after", r) for r in range(1, rounds + 1)]
    ratio = statistics.mean(after) / statistics.mean(before)
    print(f"{name:<44} before {' '.join(f'{x:.3f}' for x in before)}  after {' '.join(f'{x:.3f}' for x in after)}"
          f"  after/before {ratio:.3f}")
PY
