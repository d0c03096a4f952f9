#!/usr/bin/env bash
# CI stage: build the container image on a local Debian base and smoke-run it.
# podman, buildah, debootstrap and runc are installed with apt-get when missing; the
# debootstrap base (~1 min to make) is kept in podman's storage and as a tarball under
# IMAGE_CACHE_DIR, so later runs on the same runner (or with that folder cached) skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/infercache:ci}
bash scripts/image.sh tools
bash scripts/image.sh base
make image IMAGE="$IMAGE" BASE=localhost/infercache-base:bookworm-py
make image-smoke IMAGE="$IMAGE"
