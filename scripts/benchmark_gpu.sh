#!/usr/bin/env bash
# GPU benchmark: `cumind benchmark --device cuda` for float32 vs bfloat16, with training
# throughput for 1..N GPUs (N = GPUs visible). Results (Markdown table + JSON) go to
# benchmarks/gpu-<time>/ or $OUT_DIR.
#
#   scripts/benchmark_gpu.sh                # builds with --features cuda if needed
#   BIN=target/release/cumind scripts/benchmark_gpu.sh
#
# On a machine without an NVIDIA GPU it says so and exits with status 1.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "benchmark_gpu.sh: no NVIDIA GPU found (nvidia-smi is missing or lists no GPU); nothing to measure" >&2
  exit 1
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU')
OUT_DIR=${OUT_DIR:-benchmarks/gpu-$(date +%Y%m%d-%H%M%S)}
BIN=${BIN:-target/release/cumind}
mkdir -p "$OUT_DIR"

if [ ! -x "$BIN" ] || ! "$BIN" benchmark --help >/dev/null 2>&1; then
  cargo build --release --features cuda
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT_DIR/gpus.csv"
echo "== $GPUS GPU(s); results in $OUT_DIR"

# Inference and search throughput, f32 vs bf16, growing batches; training with 1..N GPUs.
"$BIN" benchmark --device cuda --dtypes float32,bfloat16 \
  --batch-sizes 1,16,64,256,1024 --num-devices "$GPUS" \
  --out "$OUT_DIR/cartpole.json" | tee "$OUT_DIR/cartpole.md"

# A larger network, where the GPU and bf16 matter more.
"$BIN" --set network_architecture.hidden_dim=512 --set network_architecture.latent_dim=256 \
  --set network_architecture.num_blocks=2 --set training.batch_size=1024 \
  benchmark --device cuda --dtypes float32,bfloat16 --batch-sizes 64,256,1024 \
  --num-devices "$GPUS" --out "$OUT_DIR/large.json" | tee "$OUT_DIR/large.md"
