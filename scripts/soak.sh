#!/usr/bin/env bash
# Soak test (not a CI test): train for a long time with evaluation and checkpoints, sample the
# process's resident memory every few seconds, then stop it with SIGTERM and report.
#
#   scripts/soak.sh [SECONDS] [extra cumind arguments...]
#   scripts/soak.sh 3600                                  # an hour of CartPole, the defaults
#   scripts/soak.sh 1800 --config agents/tictactoe.json
#
# Environment: CUMIND (the binary; default target/release/cumind, built if missing),
# SOAK_DIR (working directory; default a new one under /tmp), INTERVAL (seconds between
# samples; default 5).
# Output in SOAK_DIR: rss.csv (seconds,rss_kib), train.log, the run's checkpoints and logs, and
# a summary on stdout: peak RSS, RSS over the last half of the run, checkpoint sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
duration=${1:-3600}
shift || true
interval=${INTERVAL:-5}
bin=${CUMIND:-$repo/target/release/cumind}
if [ ! -x "$bin" ]; then
  cargo build --release
fi
dir=${SOAK_DIR:-$(mktemp -d /tmp/cumind-soak.XXXXXX)}
mkdir -p "$dir"
# The run works in $dir: a relative --config path is taken from the repository.
args=()
previous=
for arg in "$@"; do
  if [ "$previous" = --config ] && [ "${arg#/}" = "$arg" ]; then
    arg=$repo/$arg
  fi
  args+=("$arg")
  previous=$arg
done
set -- "${args[@]}"
cd "$dir"
echo "soak: ${duration}s in $dir"

"$bin" "$@" --set other.run_name=soak --set training.max_env_steps=0 \
  --set training.max_training_steps=0 --set training.num_episodes=100000000 \
  --set training.stop_return=0 --set training.eval_interval=5000 \
  --set training.checkpoint_interval=2000 train --no-progress > train.log 2>&1 &
pid=$!
echo "seconds,rss_kib" > rss.csv
start=$(date +%s)
while kill -0 "$pid" 2> /dev/null; do
  now=$(( $(date +%s) - start ))
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2> /dev/null || true)
  [ -n "$rss" ] && echo "$now,$rss" >> rss.csv
  if [ "$now" -ge "$duration" ]; then
    kill -TERM "$pid"
    break
  fi
  sleep "$interval"
done
status=0
wait "$pid" || status=$?
echo "exit status: $status"
tail -n 3 train.log
awk -F, -v half=$((duration / 2)) 'NR > 1 {
    if ($2 > peak) peak = $2
    if ($1 >= half) { if (lo == "" || $2 < lo) lo = $2; if ($2 > hi) hi = $2 }
  } END {
    printf "peak RSS %.1f MiB; second half of the run: %.1f to %.1f MiB\n", peak / 1024, lo / 1024, hi / 1024
  }' rss.csv
echo "checkpoint sizes:"
du -sh checkpoints/soak/step-* 2> /dev/null | tail -n 2
ls -l checkpoints/soak/"$(cat checkpoints/soak/latest)"
