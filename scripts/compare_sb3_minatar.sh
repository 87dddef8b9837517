#!/usr/bin/env bash
# Peer learning curves on the MinAtar games: stable-baselines3's DQN and PPO
# (scripts/peers/sb3_minatar.py, the minatar package's MinAtar/<Game>-v1 environments with
# sticky actions, the MinAtar paper's small CNN) on every game of GAMES (default breakout,
# asterix, freeway), algorithm of ALGOS (default dqn ppo) and seed of SEEDS (default 1 2 3), one
# run after another, each for STEPS environment steps (default 500,000) on THREADS threads
# (default: every core), evaluating the greedy policy every EVAL_INTERVAL steps (default 25,000)
# over EVAL_EPISODES episodes (default 10). Each run writes its curve as
# $OUT_DIR/<game>-<algo>-seed<S>.csv (env_steps,wall_seconds,mean_return,std_return), which
# `cumind plot` draws beside CuMind's runs; at the end a Markdown table gives the last
# evaluation's mean return per game and algorithm, the mean over seeds and each seed.
#
#   scripts/compare_sb3_minatar.sh          # results in benchmarks/sb3-minatar-<date>/ or $OUT_DIR
#   GAMES=breakout SEEDS=1 STEPS=100000 scripts/compare_sb3_minatar.sh
#
# The Python packages (scripts/peers/requirements-sb3.txt: stable-baselines3, gymnasium, minatar
# and torch 2.15.0) go into $SB3_VENV (default ~/.cache/cumind-torch-venv, the environment of
# scripts/compare_pytorch_conv.sh, so its torch is reused), installed when one is missing or
# holds another version than the pinned one.
set -euo pipefail
cd "$(dirname "$0")/.."

GAMES=${GAMES:-breakout asterix freeway}
SEEDS=${SEEDS:-1 2 3}
STEPS=${STEPS:-500000}
ALGOS=${ALGOS:-dqn ppo}
THREADS=${THREADS:-$(nproc)}
EVAL_INTERVAL=${EVAL_INTERVAL:-25000}
EVAL_EPISODES=${EVAL_EPISODES:-10}
OUT_DIR=${OUT_DIR:-benchmarks/sb3-minatar-$(date +%Y%m%d-%H%M%S)}
SB3_VENV=${SB3_VENV:-$HOME/.cache/cumind-torch-venv}
REQUIREMENTS=scripts/peers/requirements-sb3.txt
mkdir -p "$OUT_DIR"

# Installed when a pinned package is missing or another version of it is installed.
pinned_ok() {
  "$SB3_VENV/bin/python" - "$REQUIREMENTS" <<'PY' 2>/dev/null
import re, sys
from importlib.metadata import version
import minatar, stable_baselines3  # noqa: F401 (both must import)
for line in open(sys.argv[1]):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s#]+)", line)
    if m and version(m.group(1)).split("+")[0] != m.group(2):
        sys.exit(1)
PY
}
if [ ! -x "$SB3_VENV/bin/python" ] || ! pinned_ok; then
  [ -x "$SB3_VENV/bin/python" ] || python3 -m venv "$SB3_VENV"
  "$SB3_VENV/bin/pip" install -q -r "$REQUIREMENTS"
fi

echo "load before: $(cat /proc/loadavg)" | tee "$OUT_DIR/load.txt"
for game in $GAMES; do
  for algo in $ALGOS; do
    for seed in $SEEDS; do
      echo "== $game $algo seed $seed ($STEPS steps)"
      OMP_NUM_THREADS=$THREADS "$SB3_VENV/bin/python" scripts/peers/sb3_minatar.py \
        --algo "$algo" --game "$game" --seed "$seed" --steps "$STEPS" \
        --eval-interval "$EVAL_INTERVAL" --eval-episodes "$EVAL_EPISODES" \
        --threads "$THREADS" --out "$OUT_DIR/$game-$algo-seed$seed.csv"
    done
  done
done
echo "load after:  $(cat /proc/loadavg)" | tee -a "$OUT_DIR/load.txt"

"$SB3_VENV/bin/python" - "$OUT_DIR" "$GAMES" "$ALGOS" "$SEEDS" <<'PY'
import csv, statistics, sys
out, games, algos, seeds = sys.argv[1], *(a.split() for a in sys.argv[2:])
def last(game, algo, seed):
    with open(f"{out}/{game}-{algo}-seed{seed}.csv") as f:
        row = list(csv.DictReader(f))[-1]
    return int(row["env_steps"]), float(row["mean_return"])
lines = ["| game | algo | env steps | mean over seeds | " + " | ".join(f"seed {s}" for s in seeds) + " |",
         "|---|---|---:|---:|" + "---:|" * len(seeds)]
for game in games:
    for algo in algos:
        results = [last(game, algo, s) for s in seeds]
        returns = [r for _, r in results]
        steps = max(n for n, _ in results)
        cells = " | ".join(f"{r:.2f}" for r in returns)
        lines.append(f"| {game} | {algo} | {steps:,} | {statistics.mean(returns):.2f} | {cells} |")
table = "\n".join(lines)
print("\nlast evaluation's mean return (greedy policy, sticky actions on)")
print(table)
open(f"{out}/summary.md", "w").write(table + "\n")
PY
