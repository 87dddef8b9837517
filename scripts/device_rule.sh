#!/usr/bin/env bash
# The CPU against the GPU on one host, per network and batch: the measurements behind
# `--device auto` (src/network/cost.rs). For each network and batch it times a search on the
# CPU (f32, every core) and on GPU 0 (bf16, the CUDA default), and asks `--device auto` what it
# picks; then it trains a short CartPole run and times `cumind eval` on the CPU, on the GPU and
# with `--device auto`. The table goes to $OUT_DIR/device_rule.md.
#
#   BIN=target/release/cumind scripts/device_rule.sh     # a `cuda` build, on a GPU host
#   CASES="cartpole mlp256" BIN=... scripts/device_rule.sh  # some of the networks only
#       (cartpole, mlp256, mlp512, conv; the eval part always runs)
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-target/release/cumind}
OUT_DIR=${OUT_DIR:-benchmarks/device-rule-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"
if ! "$BIN" --version | grep -q 'cuda'; then
  echo "device_rule.sh: $BIN was built without the \`cuda\` feature" >&2
  exit 2
fi
TABLE="$OUT_DIR/device_rule.md"
THREADS=$(nproc)

# search_ms JSON: the median ms per search of the benchmark's one row.
search_ms() {
  python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["rows"][0]["search_ms"])' "$1" 2>/dev/null || echo "failed"
}

{
  echo "Host: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1), $THREADS CPU threads"
  echo
  echo "| network | batch | CPU ms/search (f32) | GPU ms/search (bf16) | faster | auto picks |"
  echo "|---|---:|---:|---:|---|---|"
} > "$TABLE"

# case NAME SIMS BATCHES ARGS...: one network over several batches.
case_of() {
  local name=$1 sims=$2 batches=$3
  shift 3
  local b
  for b in $batches; do
    local common=(--set "mcts.num_simulations=$sims" "$@")
    local cpu_json="$OUT_DIR/${name}_cpu_$b.json" gpu_json="$OUT_DIR/${name}_gpu_$b.json"
    "$BIN" "${common[@]}" benchmark --device cpu --dtypes float32 --batch-sizes "$b" \
      --repetitions 3 --warmup 1 --no-training --out "$cpu_json" > "$cpu_json.log" 2>&1
    "$BIN" "${common[@]}" benchmark --device cuda --dtypes bfloat16 --batch-sizes "$b" \
      --repetitions 5 --warmup 2 --no-training --out "$gpu_json" > "$gpu_json.log" 2>&1
    local auto
    auto=$("$BIN" "${common[@]}" benchmark --device auto --dtypes float32 --batch-sizes "$b" \
      --repetitions 1 --warmup 0 --no-training --out "$OUT_DIR/auto.json" 2>&1 \
      | sed -n 's/^device auto: \([a-z0-9:]*\) (\([0-9.]*\) MFLOP.*/\1 (\2 MFLOP)/p' | head -n 1)
    local c g faster
    c=$(search_ms "$cpu_json")
    g=$(search_ms "$gpu_json")
    faster=$(awk -v c="$c" -v g="$g" 'BEGIN { if (c + 0 == 0 || g + 0 == 0) print "?"; else if (c < g) printf "CPU %.1fx", g / c; else printf "GPU %.1fx", c / g }')
    echo "| $name ($sims sims) | $b | $c | $g | $faster | $auto |" | tee -a "$TABLE"
  done
}

CASES=" ${CASES:-cartpole mlp256 mlp512 conv} "
wanted() { [[ "$CASES" == *" $1 "* ]]; }
if wanted cartpole; then
  case_of cartpole 50 "1 16 256 1024 4096"
fi
if wanted mlp256; then
  case_of mlp256 50 "1 16 256 1024" --set network_architecture.hidden_dim=256 \
    --set network_architecture.latent_dim=128 --set network_architecture.num_blocks=1
fi
if wanted mlp512; then
  case_of mlp512 50 "1 16 256 1024" --set network_architecture.hidden_dim=512 \
    --set network_architecture.latent_dim=256 --set network_architecture.num_blocks=2
fi
if wanted conv; then
  case_of conv 10 "1 16 64" --config agents/connect4_gpu.json
fi

# cumind eval of a short CartPole run, on the CPU, the GPU and auto (20 episodes at once).
RUN="$OUT_DIR/runs"
"$BIN" --set training.max_env_steps=4000 --set other.log_dir="$RUN/logs" \
  --set training.checkpoint_root_dir="$RUN/checkpoints" --set other.run_name=rule \
  train --device cpu --seed 1 --no-progress > "$OUT_DIR/train.log" 2>&1
{
  echo
  echo "\`cumind eval --checkpoint DIR --episodes 20\` of a 4,000-step CartPole run:"
  echo
  echo "| device | env steps/s | line |"
  echo "|---|---:|---|"
} >> "$TABLE"
for device in cpu cuda auto; do
  out=$("$BIN" eval --checkpoint "$RUN/checkpoints/rule" --episodes 20 --device "$device" 2>&1)
  rate=$(echo "$out" | sed -n 's/.*(\([0-9]*\) steps\/s).*/\1/p' | head -n 1)
  note=$(echo "$out" | grep -E '^(device auto|note)' | head -n 1)
  echo "| $device | ${rate:-failed} | ${note:-} |" | tee -a "$TABLE"
done
echo "== $TABLE"
