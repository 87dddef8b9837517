# Sourced (from the repository root) by the scripts that time PyTorch: sets TORCH_VENV (default
# ~/.cache/cumind-torch-venv) and installs into it the torch pinned in
# scripts/peers/requirements-torch.txt, once, or again when the environment holds another version.
TORCH_VENV=${TORCH_VENV:-$HOME/.cache/cumind-torch-venv}
PINNED=$(sed -n 's/^torch==//p' scripts/peers/requirements-torch.txt)
installed() { "$TORCH_VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null; }
if [ ! -x "$TORCH_VENV/bin/python" ] || [ "$(installed)" != "$PINNED" ]; then
  [ -x "$TORCH_VENV/bin/python" ] || python3 -m venv "$TORCH_VENV"
  "$TORCH_VENV/bin/pip" install -q -r scripts/peers/requirements-torch.txt
fi
