#!/usr/bin/env bash
# Runs every test tier this machine can run (see DESIGN.md §6).
set -euo pipefail
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
