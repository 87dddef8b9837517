#!/usr/bin/env bash
# Open MPI and libclang from Debian's packages, for the `mpi` cargo feature
# (`cargo build --release --features mpi`; `mpirun -np K cumind train --distributed mpi`).
# Idempotent: does nothing when the packages are installed already.
#
#   libopenmpi-dev  mpi.h and libmpi.so, which the `mpi` crate links
#   openmpi-bin     mpirun
#   libclang-dev    libclang, which bindgen needs to generate the `mpi` crate's bindings
#
# Needs root (or sudo) for apt-get. On a machine without apt, install Open MPI (or MPICH) and
# libclang with its package manager.
set -euo pipefail

PKGS=(libopenmpi-dev openmpi-bin libclang-dev)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "Open MPI and libclang are installed: $(mpirun --version | head -1)"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "error: missing ${missing[*]} and there is no apt-get here; install Open MPI and libclang" >&2
  exit 1
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "error: installing ${missing[*]} needs root or sudo" >&2; exit 1; }
  SUDO=(sudo)
fi
echo "installing ${missing[*]}"
# Three tries: a registry hiccup should not fail a CI run.
for try in 1 2 3; do
  if "${SUDO[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    break
  fi
  [ "$try" = 3 ] && { echo "error: could not install ${missing[*]}" >&2; exit 1; }
  sleep 10
done
echo "installed: $(mpirun --version | head -1)"
