#!/usr/bin/env bash
# `buf breaking`: protos/ must stay wire- and source-compatible with the last landed
# version. Against: BUF_AGAINST_REF if set; on a branch other than main, the commit it
# forked from main (so every commit of the branch is covered); on main, HEAD~1.
# A clone without that history (shallow, or a first commit) skips with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=node_modules/.bin/buf
ref=${BUF_AGAINST_REF:-}
if [ -z "$ref" ]; then
  branch=$(git rev-parse --abbrev-ref HEAD)
  if [ "$branch" != main ] && git rev-parse --verify -q main >/dev/null; then
    ref=$(git merge-base HEAD main)
    # A branch that is main plus nothing (or main itself, detached) compares with HEAD~1.
    [ "$ref" = "$(git rev-parse HEAD)" ] && ref=HEAD~1
  else
    ref=HEAD~1
  fi
fi
if ! git rev-parse --verify -q "$ref^{commit}" >/dev/null; then
  echo "buf breaking: $ref is not in this clone's history; skipped" >&2
  exit 0
fi
echo "buf breaking against $ref ($(git rev-parse --short "$ref^{commit}"))"
"$BUF" breaking --against ".git#ref=$(git rev-parse "$ref^{commit}")"
