#!/usr/bin/env bash
# CuMind's search against DeepMind's mctx on this CPU, in one go, so the ratio comes from one
# run: mctx (jax, jit-compiled) with scripts/peers/mctx_throughput.py, then
# `cumind benchmark` with the same widths (latent 64, hidden 64, 50 simulations, 2 actions),
# pUCT at batches 1, 16, 64, 256 and Gumbel at 64. Prints the machine's load before and after
# and the speed ratio per batch size (mctx ms / CuMind ms: above 1, CuMind is faster).
#
#   scripts/compare_mctx.sh                 # results in benchmarks/mctx-<time>/ or $OUT_DIR
#
# mctx is installed once into $MCTX_VENV (default ~/.cache/cumind-mctx-venv) with the pinned
# versions of scripts/peers/requirements-mctx.txt (jax 0.10.2, mctx 0.0.71). The model
# differs in ways that favour mctx: CuMind's has layer normalisation, categorical value and
# reward heads and an extra hidden layer in each head.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH_DIR=${BENCH_DIR:-scripts/peers}
MCTX_SCRIPT=$BENCH_DIR/mctx_throughput.py
if [ ! -f "$MCTX_SCRIPT" ]; then
  echo "compare_mctx.sh: $MCTX_SCRIPT not found (set BENCH_DIR to the folder holding mctx_throughput.py)" >&2
  exit 1
fi
OUT_DIR=${OUT_DIR:-benchmarks/mctx-$(date +%Y%m%d-%H%M%S)}
MCTX_VENV=${MCTX_VENV:-$HOME/.cache/cumind-mctx-venv}
mkdir -p "$OUT_DIR"

if [ ! -x "$MCTX_VENV/bin/python" ] || ! "$MCTX_VENV/bin/python" -c 'import mctx' 2>/dev/null; then
  python3 -m venv "$MCTX_VENV"
  "$MCTX_VENV/bin/pip" install -q -r "$BENCH_DIR/requirements-mctx.txt"
fi
BIN=${BIN:-target/release/cumind}
if [ "$BIN" = target/release/cumind ]; then
  cargo build --release
fi

echo "load before: $(cat /proc/loadavg)" | tee "$OUT_DIR/load.txt"
"$MCTX_VENV/bin/python" "$MCTX_SCRIPT" --out "$OUT_DIR/mctx.json" | tee "$OUT_DIR/mctx.txt"
SIZES=(--set network_architecture.hidden_dim=64 --set network_architecture.latent_dim=64)
"$BIN" "${SIZES[@]}" --set mcts.search_policy=puct benchmark --dtypes float32 \
  --batch-sizes 1,16,64,256 --no-training --out "$OUT_DIR/cumind_puct.json" > "$OUT_DIR/cumind_puct.md"
"$BIN" "${SIZES[@]}" --set mcts.search_policy=gumbel benchmark --dtypes float32 \
  --batch-sizes 64 --no-training --out "$OUT_DIR/cumind_gumbel.json" > "$OUT_DIR/cumind_gumbel.md"
echo "load after:  $(cat /proc/loadavg)" | tee -a "$OUT_DIR/load.txt"

"$MCTX_VENV/bin/python" - "$OUT_DIR" <<'EOF'
import json, sys
out = sys.argv[1]
mctx = json.load(open(f"{out}/mctx.json"))
rows = mctx["results"]
ours = {"muzero": json.load(open(f"{out}/cumind_puct.json"))["rows"],
        "gumbel_muzero": json.load(open(f"{out}/cumind_gumbel.json"))["rows"]}
lines = ["| policy | batch | mctx ms/search | CuMind ms/search | CuMind / mctx speed | CuMind simulations/s |",
         "|---|---:|---:|---:|---:|---:|"]
for r in rows:
    match = [c for c in ours[r["policy"]] if c["batch"] == r["batch"]]
    if not match:
        continue
    c = match[0]
    lines.append(f"| {r['policy']} | {r['batch']} | {r['ms_per_search_median']:.2f} | "
                 f"{c['search_ms']:.2f} | {r['ms_per_search_median'] / c['search_ms']:.2f}x | "
                 f"{c['simulations_per_second']:,.0f} |")
text = "\n".join(lines)
print(text)
open(f"{out}/ratio.md", "w").write(text + "\n")
EOF
