#!/usr/bin/env bash
# Installs the built xgrad into a temporary prefix and builds and runs tests/install_consumer against it:
# its program on xgrad::core, and its program on xgrad::xgrad when that was built.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/install_consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/core"
if grep -q '^XGRAD_BUILD_TRAIN:BOOL=ON' "$build_dir/CMakeCache.txt"; then
    "$work/build/train"
fi
