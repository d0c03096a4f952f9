#!/usr/bin/env bash
# Regenerate src/gen into a temporary directory and fail if it differs from what is
# committed (the TypeScript side of `make protos-check`).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npx --no-install buf generate --output "$tmp"
if ! diff -r "$tmp/src/gen" src/gen; then
  echo "generated TypeScript code is stale; run \`make protos\`" >&2
  exit 1
fi
echo "generated TypeScript code is up to date"
