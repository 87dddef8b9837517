#!/usr/bin/env bash
# The first run of CuMind on a GPU machine, in order, each step under a time limit with its
# output saved. Run it once on a new GPU host and put the summary in docs/benchmarks.md.
#
#   scripts/gpu_first_run.sh                     # builds with cuda (nccl with 2+ GPUs)
#   BIN=target/release/cumind FEATURE=cuda scripts/gpu_first_run.sh
#   OUT_DIR=gpu-first-run scripts/gpu_first_run.sh
#   BIN=cumind GPU_TESTS=gpu-tests scripts/gpu_first_run.sh   # a host without Rust: binaries
#       built elsewhere (`cargo build --release --features cuda` and the executable that
#       `cargo test --release --features cuda --test gpu --no-run` names)
#
# Steps (a failed step is recorded and the next one runs; the summary lists them all):
#   01 driver and libraries: nvidia-smi, `cumind --version`, `ldd` of the binary
#   02 the ignored GPU tests (tests/gpu.rs): each fused kernel against the CPU, CPU vs CUDA
#      loss and gradients (MLP, conv), replicas on CUDA, a CUDA search. Should they fail, the
#      later steps run with `--set device.fused_kernels=false` (the written-out ops)
#   03 a tiny benchmark, timed whole: the first kernels' PTX loading and compilation
#   04 f32 vs bf16 on CUDA at batch 16, 256, 1024, 4096, on the GPU preset
#      agents/connect4_gpu.json (conv ResNet, batch 1024, 256 environments), and the CPU of the
#      same host at batch 16 and 256 with fewer repetitions (larger batches of this network
#      took over 100 s on the 16 cores of the first GPU host); with ncu installed, each
#      kernel's time over a small search of that network
#   05 a short CUDA training run on CartPole (the defaults) whose losses must fall
#   06 the same checkpoint evaluated on the CPU and on CUDA
#   07 with 2+ GPUs: training with --num-devices N, and scripts/benchmark_gpu.sh (1..N GPUs)
#   08 with 2+ GPUs and Open MPI installed: two MPI ranks on one GPU each (NCCL across the
#      ranks with `nccl`), which must end with identical parameters
# Limits: STEP_TIMEOUT seconds per step (default 900).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT_DIR=${OUT_DIR:-benchmarks/gpu-first-run-$(date +%Y%m%d-%H%M%S)}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"

# step NAME COMMAND...: run under the time limit, log to $OUT_DIR/NAME.log, record the result.
step() {
  local name=$1
  shift
  local log="$OUT_DIR/$name.log" start end rc
  echo "== $name: $*" | tee "$log"
  start=$(date +%s.%N)
  timeout "$STEP_TIMEOUT" "$@" >> "$log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  local status=ok
  if [ "$rc" = 124 ]; then status="TIMED OUT after ${STEP_TIMEOUT}s"; elif [ "$rc" != 0 ]; then status="FAILED (exit $rc)"; fi
  printf '%-28s %-26s %8ss  %s\n' "$name" "$status" "$secs" "$log" | tee -a "$SUMMARY"
  tail -n 5 "$log" | sed 's/^/    /'
  return "$rc"
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_first_run.sh: no NVIDIA GPU found (nvidia-smi is missing or lists no GPU)" >&2
  exit 1
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU')

if [ -z "${FEATURE:-}" ]; then
  FEATURE=cuda
  if [ "$GPUS" -gt 1 ] && ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
    FEATURE=nccl
  fi
fi
if ! command -v nvcc >/dev/null 2>&1; then
  CUDA_ENV=${CUDA_ENV:-$HOME/.cache/cumind-cuda-build/cuda-env.sh}
  if [ -f "$CUDA_ENV" ]; then
    # shellcheck disable=SC1090
    source "$CUDA_ENV"
  elif [ -z "${BIN:-}" ]; then
    echo "gpu_first_run.sh: nvcc not found: put a CUDA toolkit on PATH or run scripts/setup_cuda_build.sh" >&2
    exit 1
  fi
fi
if [ -z "${BIN:-}" ]; then
  step 00-build cargo build --release --features "$FEATURE" || exit 1
  BIN=target/release/cumind
fi
case "$("$BIN" --version)" in
  *cuda*) ;;
  *) echo "gpu_first_run.sh: $BIN was built without the \`cuda\` feature ($("$BIN" --version))" >&2; exit 2 ;;
esac

step 01-driver-and-libraries bash -c "nvidia-smi && '$BIN' --version && ldd '$BIN' && ! ldd '$BIN' | grep 'not found'"

# Should the GPU tests fail, the later steps run with the written-out ops instead of the fused
# kernels (`device.fused_kernels=false`), so one failing kernel does not hide everything else;
# the summary says so. (`eval` takes the setting from the checkpoint of step 05.)
FALLBACK=()
FALLBACK_ENV=()
if [ -n "${GPU_TESTS:-}" ]; then
  GPU_TEST_CMD=("$GPU_TESTS" --ignored --test-threads 1)
else
  GPU_TEST_CMD=(cargo test --release --features "$FEATURE" --test gpu -- --ignored --test-threads 1)
fi
if ! step 02-gpu-tests "${GPU_TEST_CMD[@]}"; then
  FALLBACK=(--set device.fused_kernels=false)
  FALLBACK_ENV=(CUMIND_DEVICE__FUSED_KERNELS=false)
  echo "02-gpu-tests failed: steps 03-08 run with --set device.fused_kernels=false" | tee -a "$SUMMARY"
fi

# The first call loads and compiles the kernels: the whole command's time is that cost.
step 03-first-kernels "$BIN" "${FALLBACK[@]}" benchmark --device cuda --dtypes float32 --batch-sizes 1 \
  --repetitions 1 --warmup 0 --no-training --out "$OUT_DIR/03-first-kernels.json"

step 04-cuda-f32-vs-bf16 "$BIN" "${FALLBACK[@]}" --config agents/connect4_gpu.json benchmark --device cuda \
  --dtypes float32,bfloat16 --batch-sizes 16,256,1024,4096 --out "$OUT_DIR/04-cuda.json"
step 04-cpu-same-host "$BIN" --config agents/connect4_gpu.json benchmark --device cpu \
  --dtypes float32 --batch-sizes 16,256 --repetitions 3 --warmup 1 --out "$OUT_DIR/04-cpu.json"

# Where the conv net's kernel time goes, when Nsight Compute is installed: each kernel's
# total time over a 2-simulation search of 1,024 boards (about 1,000 launches; a profile like
# this found candle's im2col and the written-out plane norm to be most of it on an H200).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
if [ -n "$NCU" ]; then
  step 04-kernel-profile "$NCU" --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$BIN" "${FALLBACK[@]}" --config agents/connect4_gpu.json --set mcts.num_simulations=2 benchmark \
    --device cuda --dtypes float32 --batch-sizes 1024 --repetitions 1 --warmup 0 --no-training \
    --out "$OUT_DIR/04-kernel-profile.json"
else
  echo "== 04-kernel-profile skipped: ncu (Nsight Compute) not found"
fi

RUN=gpu-first-run-$$
step 05-cuda-training "$BIN" "${FALLBACK[@]}" --set other.run_name="$RUN" --set training.checkpoint_root_dir="$OUT_DIR/checkpoints" \
  --set other.log_dir="$OUT_DIR/runs" --set training.max_env_steps=6000 train --device cuda --no-progress
METRICS="$OUT_DIR/runs/$RUN/metrics.csv"
# The value, reward and policy losses as logged (plain means over the batch). `loss/total` is
# no use here: it is weighted by prioritised replay's importance weights, which change as the
# priorities spread, and rose from 0.31 to 0.34 on the first H200 run while all three parts fell.
step 05-loss-falls awk -F, '
  $1 == "loss/value" || $1 == "loss/reward" || $1 == "loss/policy" {
    if (!($2 in sum)) { n++; order[n] = $2 }
    sum[$2] += $3
  }
  END {
    if (n < 20) { print "only " n " training steps logged"; exit 1 }
    k = int(n / 10); a = 0; b = 0
    for (i = 1; i <= k; i++) { a += sum[order[i]]; b += sum[order[n - k + i]] }
    printf "value + reward + policy loss: first tenth %.4f, last tenth %.4f (%d steps)\n", a / k, b / k, n
    exit !(b < a)
  }' "$METRICS"

CKPT="$OUT_DIR/checkpoints/$RUN"
step 06-eval-cpu "$BIN" eval --checkpoint "$CKPT" --device cpu --episodes 20
step 06-eval-cuda "$BIN" eval --checkpoint "$CKPT" --device cuda --episodes 20

if [ "$GPUS" -gt 1 ]; then
  step 07-train-"$GPUS"-gpus "$BIN" "${FALLBACK[@]}" --set other.run_name="$RUN-multi" \
    --set training.checkpoint_root_dir="$OUT_DIR/checkpoints" --set other.log_dir="$OUT_DIR/runs" \
    --set training.max_env_steps=6000 train --device cuda --num-devices "$GPUS" --no-progress
  step 07-benchmark-gpu env "${FALLBACK_ENV[@]}" BIN="$BIN" OUT_DIR="$OUT_DIR/benchmark_gpu" scripts/benchmark_gpu.sh
  # Two MPI ranks, one GPU each (local rank l uses cuda:l), when Open MPI and libclang are
  # installed (scripts/setup_mpi.sh; this script does not install them). With `nccl` the ranks
  # average with one NCCL communicator over both GPUs; the run says which path it took.
  if command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1; then
    # Last step: this rebuild replaces target/release/cumind with an MPI build.
    step 08-build-mpi cargo build --release --features "$FEATURE,mpi"
    # The log must show both the reducer and the end-of-run check.
    step 08-mpi-2-ranks mpirun --allow-run-as-root -np 2 --bind-to none target/release/cumind \
      "${FALLBACK[@]}" --set other.run_name="$RUN-mpi" --set training.checkpoint_root_dir="$OUT_DIR/checkpoints" \
      --set other.log_dir="$OUT_DIR/runs" --set training.max_env_steps=6000 \
      train --device cuda --distributed mpi --no-progress
    MPI_LOG="$OUT_DIR/08-mpi-2-ranks.log"
    step 08-mpi-ranks-identical bash -c "grep 'gradients averaged' '$MPI_LOG' &&
      grep '2 ranks hold identical parameters' '$MPI_LOG'"
  else
    echo "== 08 (MPI over 2 GPUs) skipped: mpirun or mpicc not found (scripts/setup_mpi.sh)"
  fi
fi

echo
echo "== summary ($GPUS GPU(s), $("$BIN" --version))"
cat "$SUMMARY"
! grep -q -E 'FAILED|TIMED OUT' "$SUMMARY"
