#!/usr/bin/env bash
# GPU benchmark: `cumind benchmark --device cuda` for float32 vs bfloat16, with training
# throughput for 1..N GPUs (N = GPUs visible). Results (Markdown table + JSON) go to
# benchmarks/gpu-<time>/ or $OUT_DIR.
#
#   scripts/benchmark_gpu.sh                          # builds the GPU binary itself
#   BIN=target/release/cumind scripts/benchmark_gpu.sh
#   BEFORE=old/cumind BIN=new/cumind scripts/benchmark_gpu.sh   # before/after, same card
#   ROUNDS=1 CARTPOLE=0 BEFORE=... BIN=... scripts/benchmark_gpu.sh  # shorter: one round, conv only
#   GRAPHS_OFF=1 DTYPES=bfloat16 BATCHES=1024,4096 BEFORE=... BIN=... scripts/benchmark_gpu.sh
#       # also BIN with `--set device.cuda_graphs=false` (the search's calls op by op), bf16 only
#   CONNECT4=0 TRAINING=0 DTYPES=bfloat16 BEFORE=... BIN=... scripts/benchmark_gpu.sh
#       # CartPole's network only, inference and search only (no training rows)
#   VARIANTS="nographs=device.cuda_graphs=false nofused=device.fused_kernels=false" \
#     BEFORE=... BIN=... scripts/benchmark_gpu.sh
#       # also BIN with each `--set KEY=VALUE` on each network measured, one table each
#   VARIANTS="h3=device.search_helper_threads=3" CONNECT4=0 DTYPES=bfloat16 \
#     BEFORE=... BIN=... scripts/benchmark_gpu.sh   # CartPole's search with 3 helper threads
#
# With BEFORE (a second `cuda` binary, an older build), the script measures both binaries in
# turn on the same GPU (old, new, old, new) and prints one before/after table per network:
# the conv ResNet of agents/connect4_gpu.json (f32 and bf16, batch 256 to 4,096, training at
# batch 1,024 with K = 5, peak GPU memory sampled by nvidia-smi) and CartPole's default
# network; then, for the new binary, the CPU against the GPU on the same networks (what
# `--device auto` decides). Tables go to $OUT_DIR/before_after.md (needs python3).
#
# Order of the checks, so each failure says what is wrong:
#   1. BIN, when given, must have been built with the `cuda` feature (`cumind --version` names
#      the features); a CPU build is refused with exit status 2 on any machine, GPU or not.
#   2. A GPU must be visible (nvidia-smi); otherwise exit status 1.
#   3. Without BIN, the script builds one: `--features nccl` when there are 2+ GPUs and
#      libnccl.so.2 is installed, `--features cuda` otherwise. nvcc comes from PATH, or from
#      the toolkit of scripts/setup_cuda_build.sh (its cuda-env.sh, sourced when present).
# The multi-GPU rows say which gradient reducer ran: NCCL with an `nccl` build, otherwise the
# in-process average through GPU 0.
set -euo pipefail
cd "$(dirname "$0")/.."

# The features in `cumind --version`'s "(features: a, b)", comma separated.
features_of() {
  "$1" --version 2>/dev/null | sed -n 's/.*(features: \(.*\))$/\1/p'
}
has_feature() {
  case ", $(features_of "$1")," in
    *", $2,"*) return 0 ;;
    *) return 1 ;;
  esac
}
refuse_without_cuda() {
  if ! has_feature "$1" cuda; then
    local version
    version=$("$1" --version 2>&1 | head -n 1 || true)
    echo "benchmark_gpu.sh: $1 was built without the \`cuda\` feature (--version: ${version:-nothing})." >&2
    echo "  Rebuild it with: cargo build --release --features cuda   (or --features nccl for 2+ GPUs)" >&2
    exit 2
  fi
}

if [ -n "${BIN:-}" ]; then
  if [ ! -x "$BIN" ]; then
    echo "benchmark_gpu.sh: BIN=$BIN is not an executable file" >&2
    exit 2
  fi
  refuse_without_cuda "$BIN"
fi
if [ -n "${BEFORE:-}" ]; then
  if [ -z "${BIN:-}" ] || [ ! -x "$BEFORE" ]; then
    echo "benchmark_gpu.sh: BEFORE=$BEFORE needs an executable file and BIN set too" >&2
    exit 2
  fi
  refuse_without_cuda "$BEFORE"
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "benchmark_gpu.sh: no NVIDIA GPU found (nvidia-smi is missing or lists no GPU); nothing to measure" >&2
  exit 1
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU')
OUT_DIR=${OUT_DIR:-benchmarks/gpu-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"

if [ -z "${BIN:-}" ]; then
  FEATURE=cuda
  if [ "$GPUS" -gt 1 ] && ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
    FEATURE=nccl
  fi
  CUDA_ENV=${CUDA_ENV:-$HOME/.cache/cumind-cuda-build/cuda-env.sh}
  if ! command -v nvcc >/dev/null 2>&1; then
    if [ -f "$CUDA_ENV" ]; then
      # shellcheck disable=SC1090
      source "$CUDA_ENV"
    else
      echo "benchmark_gpu.sh: nvcc not found: put a CUDA toolkit on PATH or run scripts/setup_cuda_build.sh" >&2
      exit 1
    fi
  fi
  echo "== building with --features $FEATURE"
  cargo build --release --features "$FEATURE"
  BIN=target/release/cumind
  refuse_without_cuda "$BIN"
fi

if [ "$GPUS" -gt 1 ]; then
  if has_feature "$BIN" nccl; then
    REDUCER="NCCL all-reduce (nccl feature)"
  else
    REDUCER="in-process average through GPU 0 (this binary has no nccl feature)"
  fi
else
  REDUCER="none (one GPU)"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT_DIR/gpus.csv"
{
  echo "binary: $BIN, $("$BIN" --version)"
  echo "GPUs: $GPUS; gradient reducer for the multi-GPU training rows: $REDUCER"
} | tee "$OUT_DIR/build.txt"
echo "== results in $OUT_DIR"

if [ -n "${BEFORE:-}" ]; then
  # run LABEL JSON ARGS...: one benchmark with the GPU's memory sampled every 100 ms; the
  # peak (MiB, over what was in use before) goes to JSON.mem.
  run() {
    local label=$1 json=$2
    shift 2
    local idle sampler
    idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -n 1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 \
      > "$json.samples" 2>/dev/null &
    sampler=$!
    echo "== $label: $*"
    "$@" --out "$json" > "$json.log" 2>&1 || { echo "  failed: see $json.log"; tail -n 5 "$json.log"; }
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    sort -n "$json.samples" | tail -n 1 | awk -v idle="$idle" '{ print $1 - idle }' > "$json.mem"
  }
  DTYPES=${DTYPES:-float32,bfloat16}
  CONV=(--config agents/connect4_gpu.json benchmark --device cuda --dtypes "$DTYPES"
    --batch-sizes "${BATCHES:-256,1024,4096}" --repetitions 5 --warmup 2)
  SMALL=(benchmark --device cuda --dtypes "$DTYPES" --batch-sizes 1,256,1024
    --repetitions 10 --warmup 3)
  if [ "${TRAINING:-1}" = 0 ]; then
    CONV+=(--no-training)
    SMALL+=(--no-training)
  fi
  OFF=(--set device.cuda_graphs=false)
  read -r -a VARIANT_LIST <<< "${VARIANTS:-}"
  for round in $(seq 1 "${ROUNDS:-2}"); do
    [ "${CONNECT4:-1}" = 0 ] && break
    run "conv, before, round $round" "$OUT_DIR/conv_before_$round.json" "$BEFORE" "${CONV[@]}"
    if [ "${GRAPHS_OFF:-0}" != 0 ]; then
      run "conv, after without graphs, round $round" "$OUT_DIR/conv_nographs_$round.json" \
        "$BIN" "${OFF[@]}" "${CONV[@]}"
    fi
    run "conv, after, round $round" "$OUT_DIR/conv_after_$round.json" "$BIN" "${CONV[@]}"
    for variant in "${VARIANT_LIST[@]}"; do
      run "conv, after with ${variant#*=}, round $round" \
        "$OUT_DIR/conv_variant-${variant%%=*}_$round.json" "$BIN" --set "${variant#*=}" "${CONV[@]}"
    done
  done
  if [ "${CARTPOLE:-1}" != 0 ]; then
    for round in $(seq 1 "${ROUNDS:-2}"); do
      run "CartPole, before, round $round" "$OUT_DIR/small_before_$round.json" "$BEFORE" "${SMALL[@]}"
      if [ "${GRAPHS_OFF:-0}" != 0 ]; then
        run "CartPole, after without graphs, round $round" \
          "$OUT_DIR/small_nographs_$round.json" "$BIN" "${OFF[@]}" "${SMALL[@]}"
      fi
      run "CartPole, after, round $round" "$OUT_DIR/small_after_$round.json" "$BIN" "${SMALL[@]}"
      for variant in "${VARIANT_LIST[@]}"; do
        run "CartPole, after with ${variant#*=}, round $round" \
          "$OUT_DIR/small_variant-${variant%%=*}_$round.json" "$BIN" --set "${variant#*=}" "${SMALL[@]}"
      done
    done
  fi
  python3 scripts/before_after.py "$OUT_DIR" | tee "$OUT_DIR/before_after.md"
  exit 0
fi

# Inference and search throughput, f32 vs bf16, growing batches; training with 1..N GPUs.
"$BIN" benchmark --device cuda --dtypes float32,bfloat16 \
  --batch-sizes 1,16,64,256,1024 --num-devices "$GPUS" \
  --out "$OUT_DIR/cartpole.json" | tee "$OUT_DIR/cartpole.md"

# A larger network, where the GPU and bf16 matter more.
"$BIN" --set network_architecture.hidden_dim=512 --set network_architecture.latent_dim=256 \
  --set network_architecture.num_blocks=2 --set training.batch_size=1024 \
  benchmark --device cuda --dtypes float32,bfloat16 --batch-sizes 64,256,1024 \
  --num-devices "$GPUS" --out "$OUT_DIR/large.json" | tee "$OUT_DIR/large.md"
