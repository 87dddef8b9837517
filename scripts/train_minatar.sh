#!/usr/bin/env bash
# CuMind's MinAtar presets (agents/minatar_<game>.json) on every game of GAMES (default
# breakout asterix freeway) and seed of SEEDS (default 1 2 3), STEPS environment steps each
# (default 500,000, the presets' budget), PARALLEL runs at a time (default: one per core) of
# THREADS threads each (default 1). On 2 cores, two one-thread runs side by side make about 1.5
# times the environment steps per second of one run on both threads (docs/benchmarks.md, "A
# MinAtar training step on one and two threads"); for one run's wall time, use PARALLEL=1
# THREADS=2.
#
# Each run is `cumind --config agents/minatar_<game>.json train --seed S` named
# $PREFIX-<game>-seed<S> (PREFIX default minatar; its metrics in runs/, its checkpoints in checkpoints/); a run whose
# checkpoint directory exists is resumed from it, one that already reached STEPS is left as it
# is. Its greedy evaluations go to $OUT_DIR/<game>-cumind-seed<S>.csv (scripts/eval_curve.awk:
# env_steps,wall_seconds,mean_return,std_return), the curves `cumind plot` draws beside the
# peers' of scripts/compare_sb3_minatar.sh; its output to $OUT_DIR/<game>-cumind-seed<S>.log. At
# the end a Markdown table gives each game's last evaluation per seed and their mean.
#
#   scripts/train_minatar.sh               # results in benchmarks/cumind-minatar-<time>/ or $OUT_DIR
#   GAMES=freeway SEEDS=3 PARALLEL=1 THREADS=2 scripts/train_minatar.sh
#
# Ctrl-C, or SIGTERM to this script, stops every run after its current training step with a
# checkpoint; running the same command again resumes them. (A script started in the
# background by a non-interactive shell ignores SIGINT, as bash does for such jobs: send it
# SIGTERM.)
set -euo pipefail
cd "$(dirname "$0")/.."

GAMES=${GAMES:-breakout asterix freeway}
SEEDS=${SEEDS:-1 2 3}
STEPS=${STEPS:-500000}
PARALLEL=${PARALLEL:-$(nproc)}
THREADS=${THREADS:-1}
OUT_DIR=${OUT_DIR:-benchmarks/cumind-minatar-$(date +%Y%m%d-%H%M%S)}
BIN=${BIN:-target/release/cumind}
PREFIX=${PREFIX:-minatar}
mkdir -p "$OUT_DIR"

for game in $GAMES; do
  if [ ! -f "agents/minatar_$game.json" ]; then
    echo "no preset agents/minatar_$game.json for the game '$game'" >&2
    exit 2
  fi
done
if [ "$BIN" = target/release/cumind ]; then
  cargo build --release
fi

# The environment steps of a run's last evaluation (0 before the first).
last_evaluated() {
  if [ -f "runs/$1/metrics.csv" ]; then
    awk -f scripts/eval_curve.awk "runs/$1/metrics.csv" | awk -F, 'NR > 1 { n = $1 } END { print n + 0 }'
  else
    echo 0
  fi
}

# One run to STEPS (fresh or resumed), then its curve.
train_one() {
  local game=$1 seed=$2
  local run="$PREFIX-$game-seed$seed" base="$OUT_DIR/$game-cumind-seed$seed"
  if [ "$(last_evaluated "$run")" -ge "$STEPS" ]; then
    echo "== $run: already at $STEPS steps"
  elif [ -d "checkpoints/$run" ]; then
    echo "== $run: resumed from checkpoints/$run"
    "$BIN" --set "training.max_env_steps=$STEPS" --set "other.num_threads=$THREADS" \
      train --resume "checkpoints/$run" >>"$base.log" 2>&1 || echo "== $run: exit $? (see $base.log)"
  else
    echo "== $run: started"
    "$BIN" --config "agents/minatar_$game.json" --set "other.run_name=$run" \
      --set "training.max_env_steps=$STEPS" --set "other.num_threads=$THREADS" \
      train --seed "$seed" >>"$base.log" 2>&1 || echo "== $run: exit $? (see $base.log)"
  fi
  if [ -f "runs/$run/metrics.csv" ]; then
    awk -f scripts/eval_curve.awk "runs/$run/metrics.csv" >"$base.csv"
  fi
}

stop_runs() {
  echo "stopping: every run saves a checkpoint"
  for pid in $(jobs -p); do
    pkill -INT -P "$pid" 2>/dev/null || true
  done
  wait
  exit 130
}
trap stop_runs INT TERM

echo "load before: $(cat /proc/loadavg)" | tee "$OUT_DIR/load.txt"
for game in $GAMES; do
  for seed in $SEEDS; do
    while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do
      wait -n || true
    done
    train_one "$game" "$seed" &
  done
done
wait
echo "load after:  $(cat /proc/loadavg)" | tee -a "$OUT_DIR/load.txt"

# The table: the last evaluation of each run, and the mean over the seeds that have one.
{
  printf '| game | environment steps | mean over seeds |'
  for seed in $SEEDS; do printf ' seed %s |' "$seed"; done
  printf '\n|---|---:|---:|'
  for _ in $SEEDS; do printf -- '---:|'; done
  printf '\n'
  for game in $GAMES; do
    for seed in $SEEDS; do
      f="$OUT_DIR/$game-cumind-seed$seed.csv"
      if [ -f "$f" ]; then tail -n 1 "$f"; else echo "-,-,-,-"; fi
    done | awk -F, -v game="$game" '
      { steps[NR] = $1; ret[NR] = $3 }
      END {
        line = ""; sum = 0; n = 0; most = 0
        for (i = 1; i <= NR; i++) {
          if (steps[i] ~ /^[0-9]+$/) {
            line = line sprintf(" %.2f |", ret[i]); sum += ret[i]; n++
            if (steps[i] + 0 > most) most = steps[i] + 0
          } else {
            line = line " - |"
          }
        }
        if (n) printf "| %s | %d | %.2f |%s\n", game, most, sum / n, line
        else printf "| %s | - | - |%s\n", game, line
      }'
  done
} | tee "$OUT_DIR/summary.md"
