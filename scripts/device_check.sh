#!/usr/bin/env bash
# GPU check of the KV hot tier: runs every test marked `gpu` (the tiny-model prefix reuse,
# version binding, demotion/promotion and pin tests over a CUDA IPC pool) on a machine
# with an NVIDIA GPU. Takes well under 5 minutes once the environment is installed.
#
#   bash scripts/device_check.sh                  # venv on top of python3's own CUDA torch
#   PYTHON=/path/bin/python bash scripts/device_check.sh   # an environment with everything
#
# The venv is made with --system-site-packages and without the kv extra, so pip keeps the
# machine's CUDA build of torch (the Makefile pins the CPU wheel). Offline machines: point
# pip at carried wheels with PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR, and have redis-server on
# PATH. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

nvidia-smi -L || { echo "device_check: no NVIDIA GPU visible" >&2; exit 2; }
bash scripts/ensure_redis.sh

if [ -z "${PYTHON:-}" ]; then
  VENV="${VENV:-/tmp/infercache-gpu-venv}"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV"
  fi
  PYTHON="$VENV/bin/python"
  "$PYTHON" -m pip install --quiet -e ./clients/python -e '.[dev]'
fi

"$PYTHON" - <<'PY'
import sys

import torch

if not torch.cuda.is_available():
    sys.exit(f"device_check: torch {torch.__version__} sees no CUDA device")
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
PY

# -m gpu selects only the CUDA-parametrised tests; with a GPU none of them may skip.
timeout 280 "$PYTHON" -m pytest -m gpu -q -rs -p no:cacheprovider "$@" | tee /tmp/device_check.log
if grep -q "SKIPPED" /tmp/device_check.log; then
  echo "device_check: GPU tests were skipped on a GPU machine" >&2
  exit 1
fi
