#!/usr/bin/env bash
# Installs what cchan's build and tests need on Debian 12 when it is missing.
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake gcc g++ clang make pkg-config libcmocka-dev libibverbs-dev libnuma-dev; do
  have_pkg "$p" || need+=("$p")
done
# hipcc is only needed for the HIP compile check; install it when available.
if ! command -v hipcc >/dev/null 2>&1; then need+=(hipcc); fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "cchan: installing missing packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "cchan: need root (or sudo) to apt-get install: ${need[*]}" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get update -qq; then
  echo "cchan: 'apt-get update' failed; install by hand: apt-get install ${need[*]}" >&2; exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/tmp/cchan-apt.log 2>&1; then
  tail -20 /tmp/cchan-apt.log >&2
  echo "cchan: 'apt-get install ${need[*]}' failed (log above)" >&2; exit 1
fi
