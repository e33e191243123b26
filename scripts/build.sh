#!/usr/bin/env bash
# Configures and builds Strata into build/ (or $STRATA_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STRATA_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_MUTATIONS=ON "$@"
cmake --build "$build" -j "$(nproc)"
