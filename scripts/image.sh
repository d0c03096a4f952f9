#!/usr/bin/env bash
# Build and smoke-test the container image without a daemon or a registry.
#
#   scripts/image.sh tools               install podman, buildah, debootstrap, runc if missing
#   scripts/image.sh base                the local Debian bookworm base (debootstrap), cached
#   scripts/image.sh build IMAGE [BASE]  podman build (chroot isolation, host network);
#                                        KV=true and TORCH_PIP_ARGS=... pass through
#   scripts/image.sh smoke IMAGE         run the image's entrypoint, check it (image_smoke.py)
#
# Without BASE the Dockerfile's default (the public python slim image) is used. The
# base is cached twice: in podman's local storage (the tag below) and as a tarball
# under IMAGE_CACHE_DIR, which a CI runner can keep between runs.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_TAG=${BASE_TAG:-localhost/infercache-base:bookworm-py}
IMAGE_CACHE_DIR=${IMAGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/infercache-ci}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The bundle pip trusts inside the build (TLS to the index may be intercepted here).
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

say() { printf '[image] %s\n' "$*" >&2; }
sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

tools() {
  local missing=()
  for t in podman buildah debootstrap runc; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if [ ${#missing[@]} -eq 0 ]; then say "tools present: $(podman --version)"; return; fi
  say "installing ${missing[*]} with apt-get"
  sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
}

base() {
  if podman image exists "$BASE_TAG"; then say "base $BASE_TAG cached in podman storage"; return; fi
  local tarball="$IMAGE_CACHE_DIR/base-bookworm-py.tar"
  if [ -s "$tarball" ]; then
    say "loading base from $tarball"
    podman load --quiet -i "$tarball" >/dev/null
    podman image exists "$BASE_TAG" && return
  fi
  local root started=$SECONDS
  root=$(mktemp -d /tmp/infercache-base.XXXXXX)
  say "debootstrap bookworm (minbase + python3) into $root"
  sudo_ debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$root" "$DEBIAN_MIRROR" >/dev/null
  # Package lists and the apt cache are not needed to run anything.
  sudo_ rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  sudo_ tar -C "$root" -c . | podman import --quiet - "$BASE_TAG" >/dev/null
  sudo_ rm -rf "$root"
  mkdir -p "$IMAGE_CACHE_DIR"
  podman save --quiet -o "$tarball.tmp" "$BASE_TAG" && mv "$tarball.tmp" "$tarball"
  say "base $BASE_TAG built in $((SECONDS - started)) s, cached at $tarball"
}

build() {
  local image=$1 base_image=${2:-} started=$SECONDS args=()
  [ -n "$base_image" ] && args+=(--build-arg "BASE=$base_image")
  [ -n "${KV:-}" ] && args+=(--build-arg "KV=$KV")
  [ -n "${TORCH_PIP_ARGS+set}" ] && args+=(--build-arg "TORCH_PIP_ARGS=$TORCH_PIP_ARGS")
  [ -s "$CA_BUNDLE" ] && args+=(--secret "id=cacert,src=$CA_BUNDLE")
  say "building $image${base_image:+ on $base_image}"
  local previous
  previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
  # No layer cache: every commit changes the source layer anyway, and cached stages would
  # pile up in a long-lived runner's storage.
  podman build --isolation=chroot --network host --layers=false "${args[@]}" -t "$image" .
  # The image this tag named before is ours to drop (storage is shared: never prune all).
  if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
  say "built $image in $((SECONDS - started)) s, $(podman image inspect --format '{{.Size}}' "$image" \
    | awk '{printf "%.0f MB", $1 / 1e6}')"
}

smoke() {
  local image=$1
  .venv/bin/python scripts/image_smoke.py "$image"
}

cmd=${1:-}
shift || true
case "$cmd" in
  tools) tools ;;
  base) base ;;
  build) build "$@" ;;
  smoke) smoke "$@" ;;
  *) sed -n '2,11p' "$0" >&2; exit 2 ;;
esac
