#!/usr/bin/env bash
# Sets everything up, builds, and runs every test (lit, gtest, pytest) via ctest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${STRAIT_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh" "$build"
cd "$build"
ctest --output-on-failure -j"${STRAIT_TEST_JOBS:-2}" "$@"
