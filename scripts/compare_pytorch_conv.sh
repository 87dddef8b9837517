#!/usr/bin/env bash
# CuMind's convolutional network against the same network in PyTorch on this CPU, in one go,
# so the ratio comes from one run: scripts/peers/pytorch_conv.py (PyTorch, the same shapes,
# plane norm and loss), then `cumind benchmark` on the Connect Four preset with the conv ResNet
# of CONV_CHANNELS channels and CONV_BLOCKS blocks (default 32 and 2), training batch 256 with
# K = 5 and inference batch 256, both limited to THREADS threads (default: every core).
# Prints the machine's load before and after and the ratios (above 1, CuMind is faster).
#
#   scripts/compare_pytorch_conv.sh         # results in benchmarks/pytorch-conv-<time>/ or $OUT_DIR
#
# PyTorch is installed once into $TORCH_VENV (default ~/.cache/cumind-torch-venv) with the
# pinned version of scripts/peers/requirements-torch.txt (torch 2.6.0; its wheel brings CUDA
# libraries, a few GB, that this CPU run does not use).
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-$(nproc)}
CHANNELS=${CONV_CHANNELS:-32}
BLOCKS=${CONV_BLOCKS:-2}
REPETITIONS=${REPETITIONS:-15}
OUT_DIR=${OUT_DIR:-benchmarks/pytorch-conv-$(date +%Y%m%d-%H%M%S)}
TORCH_VENV=${TORCH_VENV:-$HOME/.cache/cumind-torch-venv}
mkdir -p "$OUT_DIR"

if [ ! -x "$TORCH_VENV/bin/python" ] || ! "$TORCH_VENV/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$TORCH_VENV"
  "$TORCH_VENV/bin/pip" install -q -r scripts/peers/requirements-torch.txt
fi
BIN=${BIN:-target/release/cumind}
if [ "$BIN" = target/release/cumind ]; then
  cargo build --release
fi

echo "load before: $(cat /proc/loadavg)" | tee "$OUT_DIR/load.txt"
OMP_NUM_THREADS=$THREADS "$TORCH_VENV/bin/python" scripts/peers/pytorch_conv.py \
  --channels "$CHANNELS" --blocks "$BLOCKS" --threads "$THREADS" --repetitions "$REPETITIONS" \
  | tee "$OUT_DIR/pytorch.json"
RAYON_NUM_THREADS=$THREADS "$BIN" --config agents/connect4.json \
  --set network_architecture.network_type=conv \
  --set network_architecture.conv_channels="$CHANNELS" \
  --set network_architecture.num_blocks="$BLOCKS" \
  --set training.batch_size=256 --set self_play.num_unroll_steps=5 \
  benchmark --dtypes float32 --batch-sizes 256 --repetitions "$REPETITIONS" \
  --out "$OUT_DIR/cumind.json" | tee "$OUT_DIR/cumind.md"
echo "load after:  $(cat /proc/loadavg)" | tee -a "$OUT_DIR/load.txt"

"$TORCH_VENV/bin/python" - "$OUT_DIR" <<'PY'
import json, sys
out = sys.argv[1]
torch = json.load(open(f"{out}/pytorch.json"))
ours = json.load(open(f"{out}/cumind.json"))
row = [r for r in ours["rows"] if r["batch"] == torch["batch"]][0]
train = ours["training"][0]
lines = [
    "| measure | PyTorch | CuMind | CuMind / PyTorch |",
    "|---|---:|---:|---:|",
    f"| training steps/s (batch {train['batch']}, K = {train['unroll_steps']}) | "
    f"{torch['train_steps_per_second']:.2f} | {train['steps_per_second']:.2f} | "
    f"{train['steps_per_second'] / torch['train_steps_per_second']:.2f}x |",
    f"| recurrent inferences/s (batch {row['batch']}) | {torch['recurrent_per_second']:.0f} | "
    f"{row['recurrent_per_second']:.0f} | "
    f"{row['recurrent_per_second'] / torch['recurrent_per_second']:.2f}x |",
    f"| initial inferences/s (batch {row['batch']}) | {torch['initial_per_second']:.0f} | "
    f"{row['initial_per_second']:.0f} | "
    f"{row['initial_per_second'] / torch['initial_per_second']:.2f}x |",
]
table = "\n".join(lines)
print(f"\ntorch {torch['torch']}, {torch['threads']} threads; CuMind threads {ours['threads']}")
if ours.get("cpu_matmul_gflops"):
    print(f"this CPU's f32 matrix products: {ours['cpu_matmul_gflops']:.1f} GFLOP/s")
print(table)
open(f"{out}/ratio.md", "w").write(table + "\n")
PY
