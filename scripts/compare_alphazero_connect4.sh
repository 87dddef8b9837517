#!/usr/bin/env bash
# A PyTorch AlphaZero for Connect Four (scripts/peers/alphazero_connect4.py) trained for MINUTES
# minutes of wall time (default 10: self-play and training) on THREADS threads (default 2), then
# evaluated, untimed, against the opponents CuMind's Connect Four runs are evaluated against:
# EVAL_GAMES games a side (default 100) against each of OPPONENTS (default alphabeta:4, a comma
# list as `cumind eval --opponent` takes them), each game opened with 2 random plies. The
# opponents' moves come from the `cumind` Python package (`cumind.connect_four_move`), so both
# agents meet the same bitboard alpha-beta.
#
#   scripts/compare_alphazero_connect4.sh      # results in benchmarks/alphazero-connect4-<time>/ or $OUT_DIR
#   MINUTES=0.5 EVAL_GAMES=10 scripts/compare_alphazero_connect4.sh     # a short check
#
# This runs the PyTorch side only. CuMind's side, on the same cores:
#
#   timeout -s TERM 600 cumind --config agents/connect4_exact.json train
#   cumind eval --checkpoint checkpoints/<run> --opponent alphabeta:4 --games 100 --random-opening 2
#
# (a stop signal ends the training with a checkpoint, so `timeout` gives it the same 10 minutes).
#
# PyTorch is installed once into $TORCH_VENV (default ~/.cache/cumind-torch-venv, shared with
# compare_pytorch_conv.sh) with the pinned version of scripts/peers/requirements-torch.txt; the
# cumind package of this tree is installed into it with `pip install .` each time (maturin
# builds it: a Rust toolchain is needed; INSTALL_CUMIND=0 skips this).
set -euo pipefail
cd "$(dirname "$0")/.."

MINUTES=${MINUTES:-10}
THREADS=${THREADS:-2}
SEED=${SEED:-0}
OPPONENTS=${OPPONENTS:-alphabeta:4}
EVAL_GAMES=${EVAL_GAMES:-100}
OUT_DIR=${OUT_DIR:-benchmarks/alphazero-connect4-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"

# The pinned torch in $TORCH_VENV.
source scripts/peers/torch_venv.sh
if [ "${INSTALL_CUMIND:-1}" != 0 ]; then
  echo "== pip install . (the cumind package, for its Connect Four opponents)"
  "$TORCH_VENV/bin/pip" install -q .
fi

echo "load before: $(cat /proc/loadavg)" | tee "$OUT_DIR/load.txt"
OMP_NUM_THREADS=$THREADS "$TORCH_VENV/bin/python" scripts/peers/alphazero_connect4.py \
  --minutes "$MINUTES" --threads "$THREADS" --seed "$SEED" --out "$OUT_DIR" \
  --eval-opponents "$OPPONENTS" --eval-games "$EVAL_GAMES" | tee "$OUT_DIR/log.txt"
echo "load after:  $(cat /proc/loadavg)" | tee -a "$OUT_DIR/load.txt"
echo "network: $OUT_DIR/model.pt, results: $OUT_DIR/eval.json"
