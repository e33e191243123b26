#!/usr/bin/env bash
# Installs what building and testing Strata needs on Debian 12, only if missing.
set -euo pipefail
packages=(cmake g++ ninja-build pkg-config libgtest-dev openmpi-bin libopenmpi-dev libhwloc-dev libibverbs-dev iproute2 nftables
  python3-torch libtorch-dev pybind11-dev python3-dev
  clang libfuzzer-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
