#!/usr/bin/env bash
# The Python side, as a new user meets it: a fresh virtual environment, `pip install .`
# (maturin builds the package), the quickstart, the package's checks, then the `python` build
# of the Rust crates (the Gymnasium bridge's tests and lints) against that environment.
#
# Needs python3 (3.9 or newer, with venv and its shared library) and the package registry;
# everything else is installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-python3}"
# A target directory of its own: the python build links libpython, and in the CPU build's
# directory its `cumind` would replace the plain one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/python"
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT

echo "== a fresh virtual environment ($("$python" --version)) and pip install ."
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet .
"$venv/bin/python" -c "import cumind; print('cumind', cumind.version())"

echo "== the quickstart (examples/python_quickstart.py)"
"$venv/bin/python" examples/python_quickstart.py

echo "== the package's checks (tests/python/test_package.py)"
"$venv/bin/python" tests/python/test_package.py

echo "== the Gymnasium bridge from Rust (feature python)"
export VIRTUAL_ENV="$venv"
export PYO3_PYTHON="$venv/bin/python"
cargo test --release -p cumind-envs --features python --test gymnasium_bridge
echo "== the command line of a python build"
cargo build --release -p cumind-cli --features python
cli="$CARGO_TARGET_DIR/release/cumind"
"$cli" check-env gymnasium:Acrobot-v1 gymnasium:FrozenLake-v1
work="$(dirname "$venv")/cli-run"
mkdir -p "$work"
(cd "$work" && "$cli" train --env gymnasium:CartPole-v1 --env-kwargs '{"max_episode_steps": 100}' \
  --set training.max_env_steps=1500 --set training.eval_interval=500 --no-progress)
cargo clippy --release --workspace --all-targets --features python -- -D warnings
