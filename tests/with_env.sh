#!/usr/bin/env bash
# Runs a command under environment variables given as arguments before "--";
# "%3B" in a value stands for ';' (CMake cannot pass a ';' inside a test's
# environment or argument through its lists).
set -euo pipefail
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  export "${1//%3B/;}"
  shift
done
shift
exec "$@"
