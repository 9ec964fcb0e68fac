#!/usr/bin/env bash
# Builds examples/host_project, a separate meson project, with kiln as its
# subproject (subprojects/kiln -> this source tree), and runs it.
# usage: host_project_test.sh KILN_SOURCE_ROOT WORK_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
rm -rf "$work"
mkdir -p "$work/subprojects"
cp "$src/examples/host_project/meson.build" "$src/examples/host_project/main.cc" "$work/"
ln -s "$src" "$work/subprojects/kiln"
cd "$work"
# --force-fallback-for: test the subproject path even where kiln is installed.
# The CUDA code is not what this checks (and nvcc would double its build time).
meson setup --force-fallback-for=kiln -Dkiln:cuda=disabled build
ninja -C build host_app
./build/host_app
