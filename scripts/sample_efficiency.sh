#!/usr/bin/env bash
# The sample-efficiency check over many seeds: train the sample-efficient preset once per seed, then
# evaluate each run's checkpoint with `cumind eval` (20 episodes), and count the seeds that
# reach a greedy mean of 475 within 3,000 environment steps (the trainer saw an evaluation of
# 475 or more by then, and `cumind eval` on the checkpoint gives 475 or more) and 200 within
# 1,000 (the trainer's evaluations, every 100 steps), and both.
#
#   scripts/sample_efficiency.sh                      # seeds 1 2 3, the preset
#   SEEDS="$(seq 1 48)" JOBS=2 scripts/sample_efficiency.sh
#   scripts/sample_efficiency.sh --set mcts.num_simulations=4   # a candidate change
#
# Environment: CUMIND (the binary; default target/release/cumind, built if missing), PRESET
# (default agents/cartpole_sample_efficient.json), SEEDS (default "1 2 3"), JOBS (runs at a
# time, one thread each; default 1), OUT_DIR (default a new directory under /tmp).
# Runs are reproducible for a seed at one thread, whatever JOBS is.
# Output: one line per seed (first evaluation >= 200 and >= 475, where the run stopped,
# `cumind eval`'s mean) and the three counts; logs and checkpoints stay in OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
bin=${CUMIND:-$repo/target/release/cumind}
if [ ! -x "$bin" ]; then
  cargo build --release
fi
if ! version=$("$bin" --version 2>&1); then
  echo "sample_efficiency.sh: $bin does not run: $version" >&2
  echo "(a \`cuda\` build needs the NVIDIA driver's libcuda; build the CPU binary with" \
    "\`cargo build --release\` or point CUMIND at one)" >&2
  exit 1
fi
preset=${PRESET:-$repo/agents/cartpole_sample_efficient.json}
seeds=${SEEDS:-1 2 3}
jobs=${JOBS:-1}
out=${OUT_DIR:-$(mktemp -d /tmp/cumind-sample-efficiency.XXXXXX)}
mkdir -p "$out"
echo "sample efficiency: $preset $*, seeds: $(echo $seeds), results in $out" >&2

one() {
  local seed=$1
  shift
  "$bin" --config "$preset" "$@" --set other.num_threads=1 \
    --set training.checkpoint_root_dir="$out/checkpoints" --set other.run_name="seed-$seed" \
    train --seed "$seed" --no-progress > "$out/seed-$seed.log" 2>&1
  "$bin" eval --checkpoint "$out/checkpoints/seed-$seed" --episodes 20 \
    > "$out/seed-$seed.eval" 2>&1
}
export -f one
export bin preset out
# A failed run is reported in the table below (no stop line, no evaluation), not here.
printf '%s\n' $seeds | xargs -P "$jobs" -I{} bash -c 'one "$@"' _ {} "$@" || true

first() { awk -v t="$2" '/^eval @/ { if ($12 + 0 >= t) { print $3; exit } }' "$1"; }
printf '%-6s %-10s %-10s %-28s %s\n' seed "200 at" "475 at" "stopped at" "cumind eval"
for seed in $seeds; do
  log=$out/seed-$seed.log
  f200=$(first "$log" 200)
  f475=$(first "$log" 475)
  mean=$(sed -n 's/.*mean return \([0-9.]*\) .*/\1/p' "$out/seed-$seed.eval" | head -1)
  line=$(grep -m1 '^stopped' "$log" || true)
  steps=$(sed -n 's/.*| \([0-9]*\) env steps.*/\1/p' <<< "$line")
  case $line in
    *stop_return*) stop="$steps (confirmed evaluation)" ;;
    *max_env_steps*) stop="$steps (budget)" ;;
    "") stop="failed: see seed-$seed.log" ;;
    *) stop="${steps:-?} ($line)" ;;
  esac
  printf '%-6s %-10s %-10s %-28s %s\n' "$seed" "${f200:-never}" "${f475:-never}" "$stop" "${mean:-?}"
done | tee "$out/summary.txt"
awk '{ n++
  a = ($3 != "never" && $3 + 0 <= 3000 && $NF + 0 >= 475)
  b = ($2 != "never" && $2 + 0 <= 1000)
  c475 += a; c200 += b; both += a && b }
  END { printf "%d seeds: 475 within 3,000 (checked with cumind eval) %d, 200 within 1,000 %d, both %d\n", n, c475, c200, both }' \
  "$out/summary.txt"
