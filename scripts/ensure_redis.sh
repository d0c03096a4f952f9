#!/usr/bin/env bash
# Installs redis-server and faketime (Debian/Ubuntu apt-get) when missing.
# Integration tests spawn their own redis-server processes on free ports.
set -euo pipefail
# libfaketime (Debian's faketime) lets the clock-skew tests shift a sidecar's clock;
# without it they skip, so CI installs it alongside redis-server.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "${missing[*]} not found; installing with apt-get" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
