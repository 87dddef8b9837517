#!/usr/bin/env bash
# CuMind's convolutional network against the same network in PyTorch on this CPU, in one go,
# so the ratio comes from one run: scripts/peers/pytorch_conv.py (PyTorch, the same shapes,
# plane norm and loss), then `cumind benchmark` on the Connect Four preset with the conv ResNet
# of CONV_CHANNELS channels and CONV_BLOCKS blocks (default 32 and 2), the peer's heads (hidden
# width 128, supports of 5 atoms), constant action planes and f32 throughout, training batch 256 with
# K = 5 and inference batch 256, both limited to THREADS threads (default: every core), the two
# in turn ROUNDS times (default 3). CuMind's step takes its value targets as stored
# (`self_play.value_target = "root"`): PyTorch's step has no target-network pass, and neither
# has Connect Four's own training, whose n-step return (td_steps 42) reaches the end of every
# game, while the benchmark's replay of 500-step random games would add one to every step.
# Prints the machine's load before and after, each round's figures and ratio, and the median
# ratio (above 1, CuMind is faster).
#
#   scripts/compare_pytorch_conv.sh         # results in benchmarks/pytorch-conv-<time>/ or $OUT_DIR
#
# PyTorch is installed once into $TORCH_VENV (default ~/.cache/cumind-torch-venv) with the
# pinned version of scripts/peers/requirements-torch.txt (torch 2.15.0; its wheel brings CUDA
# libraries, a few GB, that this CPU run does not use).
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-$(nproc)}
CHANNELS=${CONV_CHANNELS:-32}
BLOCKS=${CONV_BLOCKS:-2}
REPETITIONS=${REPETITIONS:-15}
ROUNDS=${ROUNDS:-3}
OUT_DIR=${OUT_DIR:-benchmarks/pytorch-conv-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"

# The pinned torch in $TORCH_VENV.
source scripts/peers/torch_venv.sh
BIN=${BIN:-target/release/cumind}
if [ "$BIN" = target/release/cumind ]; then
  cargo build --release
fi

echo "load before: $(cat /proc/loadavg)" | tee "$OUT_DIR/load.txt"
# PyTorch and CuMind in turn, ROUNDS times: the machine's speed drifts over minutes, so each
# round's ratio compares two measurements made one right after the other, and the median of
# the rounds' ratios is the figure.
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS"
  OMP_NUM_THREADS=$THREADS "$TORCH_VENV/bin/python" scripts/peers/pytorch_conv.py \
    --channels "$CHANNELS" --blocks "$BLOCKS" --threads "$THREADS" --repetitions "$REPETITIONS" \
    | tee "$OUT_DIR/pytorch-$round.json"
  RAYON_NUM_THREADS=$THREADS "$BIN" --config agents/connect4.json \
    --set network_architecture.network_type=conv \
    --set network_architecture.hidden_dim=128 \
    --set network_architecture.value_support_size=2 \
    --set network_architecture.reward_support_size=2 \
    --set network_architecture.spatial_actions=false \
    --set mcts.inference_dtype=float32 --set mcts.num_simulations=50 \
    --set network_architecture.conv_channels="$CHANNELS" \
    --set network_architecture.num_blocks="$BLOCKS" \
    --set training.batch_size=256 --set self_play.num_unroll_steps=5 \
    --set self_play.value_target=root \
    benchmark --dtypes float32 --batch-sizes 256 --repetitions "$REPETITIONS" \
    --out "$OUT_DIR/cumind-$round.json" | tee "$OUT_DIR/cumind-$round.md"
done
echo "load after:  $(cat /proc/loadavg)" | tee -a "$OUT_DIR/load.txt"

"$TORCH_VENV/bin/python" - "$OUT_DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
measures = [
    ("training steps/s (batch 256, K = 5)", "train_steps_per_second",
     lambda o: o["training"][0]["steps_per_second"]),
    ("recurrent inferences/s (batch 256)", "recurrent_per_second",
     lambda o: [r for r in o["rows"] if r["batch"] == 256][0]["recurrent_per_second"]),
    ("initial inferences/s (batch 256)", "initial_per_second",
     lambda o: [r for r in o["rows"] if r["batch"] == 256][0]["initial_per_second"]),
]
runs = [(json.load(open(f"{out}/pytorch-{r}.json")), json.load(open(f"{out}/cumind-{r}.json")))
        for r in range(1, rounds + 1)]
head = "| measure | " + " | ".join(f"round {r}: PyTorch / CuMind" for r in range(1, rounds + 1))
lines = [head + " | median CuMind / PyTorch |",
         "|---|" + "---:|" * (rounds + 1)]
for name, torch_key, ours_of in measures:
    cells, ratios = [], []
    for torch, ours in runs:
        t, c = torch[torch_key], ours_of(ours)
        fmt = "{:.2f}" if t < 100 else "{:,.0f}"
        cells.append(f"{fmt.format(t)} / {fmt.format(c)} ({c / t:.2f}x)")
        ratios.append(c / t)
    lines.append(f"| {name} | " + " | ".join(cells) + f" | {statistics.median(ratios):.2f}x |")
table = "\n".join(lines)
torch, ours = runs[0]
print(f"\ntorch {torch['torch']}, {torch['threads']} threads; CuMind threads {ours['threads']}")
if ours.get("cpu_matmul_gflops"):
    print(f"this CPU's f32 matrix products: {ours['cpu_matmul_gflops']:.1f} GFLOP/s (round 1)")
print(table)
open(f"{out}/ratio.md", "w").write(table + "\n")
PY
