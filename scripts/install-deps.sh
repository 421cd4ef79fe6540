#!/bin/sh
# Installs the Debian packages autopar builds against. Idempotent: packages
# already present are left alone, and apt is not touched at all when nothing
# is missing. CUDA is optional and never installed here.
set -eu

pkgs="build-essential cmake pkg-config libglpk-dev libcjson-dev"
[ "${AP_WITH_MPI:-0}" = 1 ] && pkgs="$pkgs libopenmpi-dev openmpi-bin"
# Opt-in tools of the hardening checks (docs/hardening.md).
[ "${AP_WITH_FUZZ:-0}" = 1 ] && pkgs="$pkgs clang"
[ "${AP_WITH_VALGRIND:-0}" = 1 ] && pkgs="$pkgs valgrind"

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
