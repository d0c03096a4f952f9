#!/usr/bin/env bash
# Installs redis-server (Debian/Ubuntu apt-get) when the binary is missing.
# Integration tests spawn their own redis-server processes on free ports.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "redis-server not found; installing it with apt-get" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server
