#!/usr/bin/env bash
# Builds (once) the LiteLLM proxy's own venv for bench.gateway and prints its path.
#   bash scripts/litellm_venv.sh            # prints e.g. ~/.cache/infercache/litellm-1a2b3c4d5e6f
# The venv lives in ${INFERCACHE_CI_CACHE:-$HOME/.cache/infercache}/litellm-<hash of the pins
# file> and is reused while the pins file is unchanged; flock keeps two builds from racing.
# LiteLLM's dependency tree is large and conflicts with the project's pins, hence its own venv.
set -euo pipefail
cd "$(dirname "$0")/.."
pins=bench/gateway/litellm-pins.txt
cache=${INFERCACHE_CI_CACHE:-$HOME/.cache/infercache}
hash=$(sha256sum "$pins" | cut -c1-12)
venv="$cache/litellm-$hash"
mkdir -p "$cache"
exec 9>"$cache/litellm-$hash.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  echo "litellm_venv: building $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins" >&2
  "$venv/bin/python" -c "import litellm.proxy.proxy_server" >&2
  touch "$venv/.complete"
fi
echo "$venv"
